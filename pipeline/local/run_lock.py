"""One run at a time per output directory, and what became of the last one.

Two runs on one output directory would race on MLMD (SQLite) and on the serving dir;
the second one fails fast instead. ``flock`` is released by the kernel when the process
dies, even by SIGKILL, so a killed run never leaves a stale lock behind.

The lock file also records the run's outcome (``running`` while it holds the lock, then
``succeeded``, ``failed`` or ``stopped``), because MLMD cannot: a run stopped or failed
before its first component leaves no execution there. The next run says how the previous
one ended, and ``report`` marks an evaluation that is not of the latest attempt.
SIGTERM (``kill``, a container stop) stops a run the way Ctrl-C does: the running
component is abandoned, a staged push is removed (``artifacts/serving_dir.py``), the lock is
released and the outcome recorded.

A stop signal also ends this process's child processes. Under ``--beam-mode multi_processing``
Beam's SDK workers are ``sh -c python -m ...sdk_worker_main`` children, and on the way out Beam
joins the thread that waits for each one (Beam 2.59 ``local_job_service.SubprocessSdkWorker.run``,
``worker_handlers.SubprocessSdkWorkerHandler.stop_worker``); a worker busy with a bundle never
exits by itself, so a SIGTERM sent to the run alone (a terminal's Ctrl-C reaches the whole
process group, ``kill PID`` does not) hung there and the workers outlived the run.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator

from stackenv.errors import PathError, ProjectError, find_in_chain

from pipeline.results.run_outcome import FAILED, LOCK_FILE, RUNNING, STOPPED, SUCCEEDED, Attempt, last_attempt, now


class OutputDirBusy(ProjectError):
    """Another run holds the output directory's lock."""


def _open_lock_file(path: str) -> int:
    """The lock file, never through a symlink (a link planted there would be truncated)."""
    try:
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise PathError(f"{path} is a symbolic link; a run writes only real files inside --output. "
                            "Remove the link and run again.", path) from None
        raise


def _write(fd: int, attempt: Attempt) -> None:
    """Best effort: a full disk must not hide the run's own error behind this record's."""
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, (json.dumps(dataclasses.asdict(attempt)) + "\n").encode())
    except OSError:
        pass


class _Stop:
    """The signal that stopped the run, if one did."""

    name: str | None = None


#: How long stopped child processes get to exit after SIGTERM before they are killed.
CHILD_GRACE_S = 5.0


#: Beam's runner-side threads (fn_api_runner/worker_handlers.py, worker/data_plane.py, the same names in
#: Beam 2.59 and 2.77) and what each raises once the stop has ended the worker processes: ``run_worker``
#: "Worker subprocess exited with return code -15"; the control and data channels' readers the
#: ``grpc.RpcError`` of their stream, cancelled by the worker's exit.
_STOPPED_WORKER_THREADS = {"run_worker": "RuntimeError", "beam_control_read": "RpcError",
                           "read_grpc_client_inputs": "RpcError"}


def _is_stopped_worker(args) -> bool:
    expected = _STOPPED_WORKER_THREADS.get(str(getattr(args.thread, "name", "")))
    if expected == "RuntimeError":
        return args.exc_type is RuntimeError
    if expected == "RpcError":
        import grpc

        return issubclass(args.exc_type, grpc.RpcError)
    return False


def _drop_worker_exits(args) -> None:
    """The thread hook while a stop ends the children: Beam's threads that talk to the workers then
    raise (``_STOPPED_WORKER_THREADS``), which is the stop itself, not news; anything else is printed."""
    if not _is_stopped_worker(args):
        threading.__excepthook__(args)


def end_children(grace_s: float = CHILD_GRACE_S) -> None:
    """SIGTERM to every descendant of this process, SIGKILL to those still there after ``grace_s``."""
    import psutil

    threading.excepthook = _drop_worker_exits
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return
    for child in children:
        with contextlib.suppress(psutil.Error):
            child.terminate()
    _, alive = psutil.wait_procs(children, timeout=grace_s)
    for child in alive:
        with contextlib.suppress(psutil.Error):
            child.kill()
    psutil.wait_procs(alive, timeout=grace_s)


def _raise_interrupt(signum, _frame) -> None:
    _Stop.name = signal.Signals(signum).name
    end_children()
    raise KeyboardInterrupt(_Stop.name)


def _interrupt(_signum, _frame) -> None:
    """SIGINT: Ctrl-C as Python raises it, after this process's children are ended (see the module's note)."""
    end_children()
    raise KeyboardInterrupt


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (only there can a
    handler be set; elsewhere, e.g. in a test's thread, SIGTERM keeps its default)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:  # a handler someone else set is left alone
        signal.signal(signal.SIGINT, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)


def stop_signal() -> str | None:
    """"SIGTERM" when SIGTERM stopped the run, else None (Ctrl-C, or not stopped)."""
    return _Stop.name


@contextlib.contextmanager
def serving_dir_lock(serving_dir: str) -> Iterator[None]:
    """Hold the run lock of the output that ``serving_dir`` belongs to (``<output>/serving/<model>``, where a
    run's Pusher writes), so ``rollback`` never renames a version while a run compares against it or pushes
    over it. A serving dir outside a run's output (an object store, a copy) has no run to wait for."""
    parent = os.path.dirname(os.path.abspath(serving_dir.rstrip("/")))
    output_dir = os.path.dirname(parent)
    path = os.path.join(output_dir, LOCK_FILE)
    if "://" in serving_dir or os.path.basename(parent) != "serving" or not os.path.isfile(path):
        yield
        return
    fd = _open_lock_file(path)
    try:
        _lock_or_refuse(fd, output_dir, lambda held_by: (
            f"A pipeline run is using {output_dir} ({held_by}), whose Pusher and Evaluator read and write "
            f"{serving_dir}; nothing was rolled back. Wait for the run to finish (it may push a new version), "
            "then run rollback again."))
        yield
    finally:
        os.close(fd)  # releases the flock; the lock file's record of the last run is left as it was


def _lock_or_refuse(fd: int, output_dir: str, paragraph: Callable[[str], str]) -> None:
    """Take ``output_dir``'s lock without waiting, or raise OutputDirBusy with ``paragraph`` of who holds it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = last_attempt(output_dir)
        raise OutputDirBusy(paragraph(f"pid {holder.pid}, started {holder.started}" if holder
                                      else "another process")) from None


#: A class's module path as Beam writes it into a re-raised message (``pipeline.local.runner.ComponentFailed: ``).
_DOTTED_CLASS = re.compile(r"\b(?:[A-Za-z_]\w*\.)+([A-Z]\w*): ")


def failure_line(error: BaseException) -> str:
    """The failure as the user read it, in one line for the next run's first line: the failing component
    and the project's paragraph when there is one, never an internal class path."""
    from pipeline.local import disk_full

    known = find_in_chain(error, ProjectError)
    runner = sys.modules.get("pipeline.local.runner")
    failed = find_in_chain(error, runner.ComponentFailed) if runner is not None else None
    if disk_full.is_disk_full(error):
        return f"{failed.node_id if failed is not None else 'a step'} found the disk full (no space left on device)"
    if known is not None:
        text = f"{failed.node_id} failed: {known.paragraph}" if failed is not None else known.paragraph
    else:
        text = str(failed if failed is not None else error)
    first = (text.strip().splitlines() or [type(error).__name__])[0]
    first = _DOTTED_CLASS.sub(lambda match: "" if match.group(1) == "ComponentFailed" else match.group(1) + ": ",
                              first)
    return first[:300]


@contextlib.contextmanager
def exclusive_run(output_dir: str) -> Iterator[None]:
    """Hold ``output_dir``'s lock for a run and record its outcome; say how the last one ended."""
    if "://" in output_dir:  # object stores have no flock; Kubeflow runs are isolated per run anyway
        yield
        return
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, LOCK_FILE)
    fd = _open_lock_file(path)
    try:
        _lock_or_refuse(fd, output_dir, lambda held_by: (
            f"Another pipeline run is using {output_dir} ({held_by}). Wait for it to finish, or "
            "use a different --output for a parallel run."))
        previous = last_attempt(output_dir)
        if previous is not None and previous.describe():
            logging.getLogger("pipeline").warning("%s Completed components are cached in MLMD; this run resumes "
                                                  "from them.", previous.describe())
        attempt = Attempt(os.getpid(), now(), RUNNING)
        _write(fd, attempt)
        _Stop.name = None
        try:
            with _sigterm_as_interrupt():
                yield
        except BaseException as error:
            # Beam re-raises Ctrl-C inside a component as RuntimeError("KeyboardInterrupt ...")
            if find_in_chain(error, KeyboardInterrupt) or str(error).startswith("KeyboardInterrupt"):
                ended = dataclasses.replace(attempt, outcome=STOPPED, ended=now(),
                                            detail=_Stop.name or "SIGINT (Ctrl-C)")
            else:
                ended = dataclasses.replace(attempt, outcome=FAILED, ended=now(), detail=failure_line(error))
            _write(fd, ended)
            raise
        _write(fd, dataclasses.replace(attempt, outcome=SUCCEEDED, ended=now()))
    finally:
        os.close(fd)  # releases the flock

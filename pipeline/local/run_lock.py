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
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import logging
import os
import signal
from collections.abc import Iterator

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


def _raise_interrupt(signum, _frame) -> None:
    _Stop.name = signal.Signals(signum).name
    raise KeyboardInterrupt(_Stop.name)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (only there can a
    handler be set; elsewhere, e.g. in a test's thread, SIGTERM keeps its default)."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def stop_signal() -> str | None:
    """"SIGTERM" when SIGTERM stopped the run, else None (Ctrl-C, or not stopped)."""
    return _Stop.name


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
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = last_attempt(output_dir)
            held_by = f"pid {holder.pid}, started {holder.started}" if holder else "another process"
            raise OutputDirBusy(
                f"Another pipeline run is using {output_dir} ({held_by}). Wait for it to finish, or "
                "use a different --output for a parallel run.") from None
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
                first = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
                ended = dataclasses.replace(attempt, outcome=FAILED, ended=now(), detail=first)
            _write(fd, ended)
            raise
        _write(fd, dataclasses.replace(attempt, outcome=SUCCEEDED, ended=now()))
    finally:
        os.close(fd)  # releases the flock

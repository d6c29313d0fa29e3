"""Keep library noise off the terminal: file descriptor 2 goes to a log file while a command runs.

TensorFlow's C++ runtime, absl and grappler write straight to file descriptor 2
(``WARNING: All log messages before absl::InitializeLog() ...``, ``W0000 ...
op_level_cost_estimator.cc ...``), and so do Beam worker processes started by TFX; Python
``logging`` never sees those lines, so only an OS-level redirect catches them. While a
command runs, fd 2 (inherited by every child process) points at a log file, and Python's
``sys.stderr`` (the project's log lines, error paragraphs, tracebacks) writes to a
duplicate of the real stderr that was saved first. Python warnings (e.g. FutureWarnings
about the Python version from cloud client libraries) go to the log file too. With ``-v``
nothing is diverted.
"""
import contextlib
import errno
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from typing import TextIO

from stackenv import text_out

LOG_NAME = "library-output.log"


def log_path(output_dir: str | None) -> str:
    """``<output>/logs/library-output.log`` for commands with an output dir, else under the temp dir."""
    base = os.path.join(output_dir, "logs") if output_dir else os.path.join(tempfile.gettempdir(), "tfx-project")
    return os.path.join(base, LOG_NAME)


@contextlib.contextmanager
def library_output_to(path: str, header: str = "") -> Iterator[str]:
    """Point fd 2 at ``path`` (appended) and ``sys.stderr`` at the real stderr; restore on exit."""
    if path != os.devnull:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    sys.stderr.flush()
    saved_fd = os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(log_fd, f"\n==== {time.strftime('%Y-%m-%d %H:%M:%S')} {header}\n".encode("utf-8", text_out.ERRORS))
    except OSError:  # a full disk: the command's own paragraph says so; the log goes without its header
        pass
    os.dup2(log_fd, 2)
    os.close(log_fd)
    terminal: TextIO = sys.stderr
    if _writes_to_fd2(sys.stderr):  # else sys.stderr is already elsewhere (a test's capture): keep it
        terminal = open(saved_fd, "w", buffering=1, encoding=getattr(sys.stderr, "encoding", None) or "utf-8",
                        errors=text_out.ERRORS, closefd=False)
    original_stderr, original_showwarning = sys.stderr, warnings.showwarning
    log_file = open(path, "a", buffering=1, encoding="utf-8", errors=text_out.ERRORS)

    def to_log(message, category, filename, lineno, file=None, line=None):
        try:
            log_file.write(warnings.formatwarning(message, category, filename, lineno, line))
        except OSError:  # a full disk: a warning is not worth a traceback
            pass

    sys.stderr, warnings.showwarning = terminal, to_log
    try:
        yield path
    finally:
        sys.stderr, warnings.showwarning = original_stderr, original_showwarning
        terminal.flush()  # left open: logging handlers made meanwhile still write to it
        log_file.close()
        os.dup2(saved_fd, 2)


def _writes_to_fd2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


def unless_verbose(verbose: bool, output_dir: str | None):
    """The CLI's hook: divert library output for the command, except with ``-v``.

    An output dir that cannot hold the log (a file, read-only, ...) is the command's error to
    report in its own paragraph, so the library log then goes to the temp dir instead.
    """
    if verbose:
        return contextlib.nullcontext(None)
    path = log_path(output_dir)
    if any(os.path.islink(p) for p in (os.path.dirname(path), path)):
        path = log_path(None)  # never write through a link inside --output (the run refuses it: preflight)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "a"):
            pass
    except OSError as error:
        # A full disk under --output: the library's noise is dropped rather than written outside it (the
        # command's own paragraph says the disk is full); any other refusal: the temp dir's log.
        path = os.devnull if error.errno in (errno.ENOSPC, errno.EDQUOT) else log_path(None)
    return library_output_to(path, " ".join(sys.argv))

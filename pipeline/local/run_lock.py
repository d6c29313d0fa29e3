"""One run at a time per output directory.

Two runs on one output directory would race on MLMD (SQLite) and on the serving dir;
the second one fails fast instead. ``flock`` is released by the kernel when the process
dies, even by SIGKILL, so a killed run never leaves a stale lock behind.
"""
import contextlib
import fcntl
import os
import time
from collections.abc import Iterator

from stackenv.errors import ProjectError

LOCK_FILE = ".run.lock"


class OutputDirBusy(ProjectError):
    """Another run holds the output directory's lock."""


@contextlib.contextmanager
def exclusive_run(output_dir: str) -> Iterator[None]:
    if "://" in output_dir:  # object stores have no flock; Kubeflow runs are isolated per run anyway
        yield
        return
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, LOCK_FILE)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise OutputDirBusy(
                f"Another pipeline run is using {output_dir} ({holder}). Wait for it to finish, or "
                "use a different --output for a parallel run.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)

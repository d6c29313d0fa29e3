"""A private temporary folder per run, removed when the run ends, failed or not.

Why: a run's libraries leave temporary files behind in the system's temp folder: Beam's
``beam-pipeline-temp*`` folders, TFX's packaging ``build`` folders, AutoGraph's generated
modules (a few hundred MB per run, measured once). Each library picks its own names, so
the one rule that catches them all is the place they write: ``TMPDIR`` and Python's
``tempfile.tempdir`` point into one folder for the run's duration (child processes, e.g.
Beam's workers, inherit the variable), and that folder is removed at the end. A run
killed by SIGKILL cannot clean up; the next run removes such folders of dead processes.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator

from pipeline.results.run_outcome import alive

PREFIX = "tfx-run-"


def _remove_orphans(root: str) -> None:
    """Private folders of earlier runs whose process is gone (``tfx-run-<pid>-*``)."""
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        pid = name[len(PREFIX):].split("-", 1)[0]
        if name.startswith(PREFIX) and pid.isascii() and pid.isdigit() and not alive(int(pid)):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)


@contextlib.contextmanager
def private_temp_dir() -> Iterator[str]:
    """Point ``TMPDIR`` and ``tempfile`` at a fresh folder; remove it (and its contents) on exit."""
    root = tempfile.gettempdir()
    _remove_orphans(root)
    path = tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root)
    saved_env, saved_tempdir = os.environ.get("TMPDIR"), tempfile.tempdir
    os.environ["TMPDIR"], tempfile.tempdir = path, path
    try:
        yield path
    finally:
        tempfile.tempdir = saved_tempdir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env
        shutil.rmtree(path, ignore_errors=True)

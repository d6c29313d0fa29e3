"""A full disk, whichever layer hit it, as one paragraph: which step, which path, how much room, the served model.

Why: each library says "disk full" its own way and none names a fix: Python's ``OSError`` (errno ENOSPC or
EDQUOT), TensorFlow's ``ResourceExhaustedError``/``UnknownError`` ("No space left on device"), SQLite through
ML Metadata ("database or disk is full query: INSERT INTO Context ..."), Beam re-raising any of them as text.
The data was always safe (a version is published by rename, MLMD writes in transactions, a re-run resumes
from the cache), so the paragraph says that too, checked against the serving folder, not assumed.
"""
from __future__ import annotations

import errno
import os
import re
import shutil

from stackenv.errors import EXIT_PIPELINE_FAILED, PathError

#: What each layer writes when the disk (or the user's quota) is full.
_SIGNS = ("No space left on device", "database or disk is full", "Disk quota exceeded", "disk is full")
_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
#: A path in a library's message: ``/abs/path`` up to a quote, a comma, a semicolon or a space.
_PATH = re.compile(r"(/[^\s'\",;:]+)")


class DiskFull(PathError):
    """The disk under a path filled up while a command wrote there."""

    exit_code = EXIT_PIPELINE_FAILED


def is_disk_full(error: BaseException) -> bool:
    """True when ``error`` or anything on its cause/context chain says the disk is full."""
    return _full_error(error) is not None


def _chain(error: BaseException | None):
    seen: set[int] = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def _full_error(error: BaseException) -> BaseException | None:
    for link in _chain(error):
        if isinstance(link, OSError) and link.errno in _FULL_ERRNOS:
            return link
        if any(sign in str(link) for sign in _SIGNS):
            return link
    return None


def _nearly_full(output_dir: str | None) -> bool:
    """The disk under ``output_dir`` has almost nothing left (what a failure there most likely came from:
    SQLite, after its full write was rolled back, says only "cannot commit - no transaction is active")."""
    where = _existing(os.path.abspath(output_dir)) if output_dir and "://" not in output_dir else None
    if where is None:
        return False
    try:
        usage = shutil.disk_usage(where)
    except OSError:
        return False
    return usage.free < min(NEARLY_FULL_BYTES, usage.total // 20)


#: A disk with less free than this (and than 5% of its size) is full for any practical write of a run.
NEARLY_FULL_BYTES = 8 * 2**20


def paragraph(error: BaseException, output_dir: str | None, step: str | None,
              started: float | None = None) -> DiskFull | None:
    """The paragraph for a full disk (None for any other error). ``output_dir``: the command's --output (the
    run's serving folder is read there); ``step``: the component that failed, if one did; ``started``: when the
    command began (a version published since then is this run's)."""
    full = _full_error(error)
    own = ""
    if full is None:
        if not _nearly_full(output_dir):
            return None
        full = error
        root = list(_chain(error))[-1]  # the library's own words, not a wrapper's
        first = (str(root).strip().splitlines() or [type(root).__name__])[0]
        first = first.replace("Error when executing query: ", "").split(" query:", 1)[0]  # SQLite's, without SQL
        own = f" (the step's own error: {first[:200]})"
    path = _path_of(full, output_dir) if not own else os.path.abspath(output_dir or ".")
    where = _existing(path) if path else None
    free = _free_mb(where) if where else None
    used = _size_mb(output_dir) if output_dir and os.path.isdir(output_dir) else None
    doing = f"while {step} ran" if step else "while the command wrote its files"
    room = f" ({free:.0f} MB free there now)" if free is not None else ""
    needed = (f" A run into {output_dir} has written {used:.0f} MB so far, and the step that failed writes about as "
              f"much again: free at least {max(used, 1):.0f} MB there, or choose an --output on a larger disk"
              if used is not None else " Free space there, or write to a larger disk")
    served = _served_line(output_dir, started)
    return DiskFull(f"The disk is full: no space was left {doing}, writing {path or 'its files'}{room}{own}.{needed}, "
                    f"then run the same command again: the completed steps are cached. {served}", path or "")


def _path_of(full: BaseException, output_dir: str | None) -> str | None:
    if isinstance(full, OSError) and full.filename:
        return str(full.filename)
    if "database or disk is full" in str(full) and output_dir:  # SQLite names no file: ML Metadata's store
        return os.path.join(os.path.abspath(output_dir), "metadata.sqlite")
    match = _PATH.search(str(full))
    if match:
        return match.group(1)
    return os.path.abspath(output_dir) if output_dir else None


def _existing(path: str) -> str | None:
    """The nearest existing folder of ``path`` (the file itself was never written)."""
    while path and not os.path.isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            return None
        path = parent
    return path or None


def _free_mb(path: str) -> float | None:
    try:
        return shutil.disk_usage(path).free / 2**20
    except OSError:
        return None


def _size_mb(folder: str) -> float:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
    return total / 2**20


def _served_line(output_dir: str | None, started: float | None) -> str:
    """What the serving folder holds now, read (the Pusher publishes by rename: a version is whole or absent)."""
    serving = os.path.join(output_dir, "serving") if output_dir else None
    if not serving or not os.path.isdir(serving):
        return "Nothing was pushed: no model is served from this output."
    from artifacts.serving_dir import list_versions

    served, new = [], []
    for model in sorted(os.listdir(serving)):
        versions = list_versions(os.path.join(serving, model))
        if versions:
            served.append(f"{model} version {versions[-1]}")
            version_dir = os.path.join(serving, model, str(versions[-1]))
            if started is not None and os.path.getmtime(version_dir) >= started:
                new.append(served[-1])
    if not served:
        return "Nothing was pushed: no model is served from this output."
    whole = "a version appears only whole, so nothing half-written is visible"
    if new:
        return (f"This run had pushed {', '.join(new)} before the disk filled; it is whole and served ({serving}; "
                f"{whole}).")
    return f"The served model is unchanged ({', '.join(served)} in {serving}; {whole})."

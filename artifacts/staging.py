"""Leftover staging copies of an interrupted push: found and removed at the next push or ``models``.

Why: the Pusher copies a version into ``<base>/.incomplete-<version>-<pid>-<id>`` and renames it into
place (artifacts/serving_dir.py); a push killed with SIGKILL (or a machine that lost power) never
reaches its cleanup, and the hidden copy, as big as a model, stayed for good while ``models`` showed
nothing. A copy is stale when the process that made it is gone (its pid is in the name; local
folders, where pids mean something) or, for a copy without a live owner to ask (an object store, a
name from before pids were recorded), when it is older than :data:`STALE_AFTER_S`.
"""
from __future__ import annotations

import os
import re
import time

import tensorflow as tf

PREFIX = ".incomplete-"
#: A staging copy no process can be asked about is left alone this long (a push copies in minutes).
STALE_AFTER_S = 6 * 3600
_WITH_PID = re.compile(re.escape(PREFIX) + r"\d+-(\d+)-[0-9a-f]+")


def staging_name(version: int, token: str) -> str:
    """The hidden folder a push stages ``version`` in: its pid, so a later look can tell a dead push's copy."""
    return f"{PREFIX}{version}-{os.getpid()}-{token}"


def stale_copies(base_dir: str) -> list[str]:
    """The names of the staging copies in ``base_dir`` whose push is over (see the module docstring)."""
    local = "://" not in base_dir
    if not tf.io.gfile.isdir(base_dir):
        return []
    stale = []
    for name in sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(base_dir)):
        if not name.startswith(PREFIX):
            continue
        match = _WITH_PID.fullmatch(name)
        if local and match is not None:
            if not _alive(int(match.group(1))):
                stale.append(name)
        elif _age_s(os.path.join(base_dir, name)) > STALE_AFTER_S:
            stale.append(name)
    return stale


def remove_stale_copies(base_dir: str) -> list[str]:
    """Remove :func:`stale_copies`; returns the names removed (each was never a version: nothing served)."""
    removed = []
    for name in stale_copies(base_dir):
        try:
            tf.io.gfile.rmtree(os.path.join(base_dir, name))
            removed.append(name)
        except (tf.errors.OpError, OSError):  # gone meanwhile, or not ours to remove: left for the next look
            continue
    return removed


def cleaned_line(base_dir: str, removed: list[str]) -> str:
    """What a command says after removing ``removed``."""
    names = ", ".join(removed[:3]) + (f" and {len(removed) - 3} more" if len(removed) > 3 else "")
    return (f"Removed {len(removed)} leftover staging cop{'y' if len(removed) == 1 else 'ies'} of an interrupted "
            f"push from {base_dir} ({names}); never a served version, nothing else changed.")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def _age_s(path: str) -> float:
    try:
        return time.time() - tf.io.gfile.stat(path).mtime_nsec / 1e9
    except (tf.errors.OpError, OSError):
        return 0.0

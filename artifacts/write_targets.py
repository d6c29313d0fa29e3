"""Where a command may write a file a user named (``report --to``, ``tfjob --to``, ``compile --output``).

Why: such a flag takes any path, and a path into a run's output directory can name what the run
itself keeps: ML Metadata's store (``report --to O/metadata.sqlite`` replaced it with HTML, and every
later ``run``/``report`` on O failed with raw SQL), a pushed model version, the pinned schema, the
prepared data or a component's artifacts. So a target is refused, before anything is written, when it
(symlinks followed) is or lies inside one of those, in any run output above it (a folder holding
``metadata.sqlite``) or in a serving directory (a folder of versions with ``saved_model.pb``), or when it
is an SQLite database or a folder. Anything else is the user's to overwrite.
"""
from __future__ import annotations

import os
from collections.abc import Mapping

from stackenv.errors import ConfigError

#: A run's store and its SQLite side files (pipeline/config.py ``metadata_path``).
STORE = "metadata.sqlite"
STORE_FILES = (STORE, STORE + "-journal", STORE + "-wal", STORE + "-shm")
#: The folders a run keeps under its output (pipeline/config.py: pipeline root, serving, prepared data,
#: logs; pipeline/local/schema_pin.py; pipeline/tuning.py), each the run's own.
RUN_FOLDERS = ("tfx", "serving", "data", "schema", "logs", "hyperparameters")
_SQLITE_MAGIC = b"SQLite format 3\x00"


def check_write_target(path: str, flag: str, read_folders: Mapping[str, str | None] | None = None) -> None:
    """ConfigError when writing ``path`` would replace a run's own file (see the module docstring), or put a
    file inside a folder the same command reads (``read_folders``: {flag: folder}, e.g. --data), where the
    next run would read it back as input."""
    if "://" in path:
        return
    real = os.path.realpath(os.path.expanduser(path))
    why = _kept_by_a_run(real) or _kept_elsewhere(real) or _read_back(real, read_folders or {})
    if why:
        shown = path if real == os.path.abspath(path) else f"{path} (which leads to {real})"
        raise ConfigError(flag, f"{shown} is {why}, which this command must not write over. Nothing was "
                          f"written. Choose a file of your own for {flag}, e.g. one beside the run's output "
                          "folder.")


def _kept_by_a_run(real: str) -> str:
    """What a run output above ``real`` keeps there, or ""."""
    folder = os.path.dirname(real)
    parts = [os.path.basename(real)]
    while True:
        if os.path.isfile(os.path.join(folder, STORE)):
            first = parts[-1]
            if len(parts) == 1 and first in STORE_FILES:
                return f"the ML Metadata store of the run in {folder}"
            if first in RUN_FOLDERS:
                return f"inside {os.path.join(folder, first)}, which the run in {folder} keeps (its {first} folder)"
            return ""
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        parts.append(os.path.basename(folder))
        folder = parent


def _read_back(real: str, read_folders: Mapping[str, str | None]) -> str:
    for read_flag, folder in read_folders.items():
        if folder and "://" not in folder:
            real_folder = os.path.realpath(os.path.expanduser(folder))
            if real.startswith(real_folder.rstrip(os.sep) + os.sep):
                return f"inside the {read_flag} folder {folder}, where the next run would read it back as input"
    return ""


def _kept_elsewhere(real: str) -> str:
    if os.path.isdir(real):
        return "a folder"
    if _is_sqlite(real):
        return "an SQLite database (an ML Metadata store, perhaps)"
    folder = os.path.dirname(real)
    while True:
        if os.path.isfile(os.path.join(folder, "saved_model.pb")):
            return f"inside the model version {folder}"
        parent = os.path.dirname(folder)
        if parent == folder:
            return ""
        folder = parent


def _is_sqlite(path: str) -> bool:
    try:
        with open(path, "rb") as handle:
            return handle.read(len(_SQLITE_MAGIC)) == _SQLITE_MAGIC
    except OSError:
        return False

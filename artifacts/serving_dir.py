"""The TF Serving model base directory: ``<base>/<version>/saved_model.pb``.

TF Serving loads numeric version directories and, by default, serves the highest; this
module is the one reading of that layout, shared by the Pusher (atomic publish), the
Evaluator (the served baseline), ``predict`` and the ``models``/``rollback`` commands. It
is a storage layout, not a component, hence its place in ``artifacts/``. Works on local paths
and object-store URIs alike (tf.io.gfile).
"""
from __future__ import annotations

import errno
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

from stackenv.errors import ProjectError
from stackenv.user_files import SMALL_JSON_MAX_BYTES, UserFileError, read_user_json

import tensorflow as tf

from artifacts import staging

log = logging.getLogger("components.pusher")  # the Pusher's log: shown by the CLI

#: A version folder's name: ASCII digits only (``str.isdigit`` also accepts '²' and
#: Arabic-Indic digits, which TF Serving does not read as numbers), no leading zero (TF
#: Serving would read "007" as 7 while this module looks for "7"), within int64 (TF
#: Serving's version type).
_VERSION_NAME = re.compile(r"0|[1-9][0-9]*", re.ASCII)
MAX_VERSION = 2**63 - 1


def version_number(name: str) -> int | None:
    """The version a folder name stands for, or None if it is not a version name."""
    name = name.rstrip("/")
    if not _VERSION_NAME.fullmatch(name):
        return None
    number = int(name)
    return number if number <= MAX_VERSION else None


def _entries(base_dir: str) -> list[str]:
    if not base_dir or not tf.io.gfile.isdir(base_dir):
        return []
    return sorted(entry.rstrip("/") for entry in tf.io.gfile.listdir(base_dir))


def list_versions(base_dir: str) -> list[int]:
    """Complete versions (version-named dirs holding saved_model.pb), oldest first."""
    versions = []
    for name in _entries(base_dir):
        number = version_number(name)
        if number is not None and tf.io.gfile.exists(os.path.join(base_dir, name, "saved_model.pb")):
            versions.append(number)
    return sorted(versions)


def ignored_entries(base_dir: str) -> list[tuple[str, str]]:
    """(name, why) of each visible entry that is not a complete version: never served by this
    project, never a baseline or a rollback target. Hidden entries are this module's own
    (staging, rolled-back versions)."""
    ignored = []
    for name in _entries(base_dir):
        if name.startswith("."):
            continue
        if version_number(name) is None:
            ignored.append((name, "not a version name (ASCII digits, no leading zero, at most 2^63-1)"))
        elif not tf.io.gfile.exists(os.path.join(base_dir, name, "saved_model.pb")):
            ignored.append((name, "no saved_model.pb (incomplete)"))
    return ignored


def latest_version_dir(base_dir: str) -> str | None:
    """The version TF Serving would serve, or None if nothing was pushed yet."""
    versions = list_versions(base_dir)
    return os.path.join(base_dir, str(versions[-1])) if versions else None


PUSH_INFO_FILE = "push_info.json"
_STAGING_PREFIX = staging.PREFIX
# Beside the SavedModel in a version folder. TF Serving's SavedModel loader reads only
# saved_model.pb, variables/, assets/ and assets.extra/; with --prefer_tflite_model it reads
# <version>/model.tflite (tensorflow_serving/servables/tensorflow/saved_model_bundle_factory.cc),
# so the TFLite files live under tflite/ with other names: never loaded in place of the SavedModel.
TFLITE_DIR = "tflite"
MODEL_CARD_FILES = ("model_card.md", "model_card.html")


def tflite_file(quantization: str) -> str:
    """Path of a TFLite model inside a version folder: ``tflite/model_<quantization>.tflite``."""
    return f"{TFLITE_DIR}/model_{quantization}.tflite"


def _is_local(path: str) -> bool:
    return "://" not in path


def next_version(base_dir: str, now: float | None = None) -> int:
    """A Unix-timestamp version, strictly above every existing one (TF Serving serves the highest),
    rolled-back ones included: a number once pushed is never reused for another model."""
    used = [*list_versions(base_dir), *_rolled_back_versions(base_dir)]
    return max(int(now if now is not None else time.time()), (max(used) + 1) if used else 0)


def publish_version(model_dir: str, base_dir: str, push_info: dict[str, Any],
                    copy_dir: Callable[[str, str], None],
                    add_files: Callable[[str, int], dict[str, Any]] | None = None) -> str:
    """Copy a SavedModel into ``base_dir`` as a new version, all or nothing.

    The copy goes to a hidden staging directory (TF Serving only loads numeric ones) and
    is renamed into place when complete, so a crash never leaves a partial version that
    TF Serving would try to load. On object stores, where a directory rename is a copy,
    ``saved_model.pb`` is copied last: loaders treat it as the sign a version is ready.
    ``add_files(staging_dir, version)`` writes what goes beside the SavedModel (TFLite models, the
    model card) into the staged folder; what it returns is merged into push_info.json.
    """
    tf.io.gfile.makedirs(base_dir)
    removed = staging.remove_stale_copies(base_dir)  # a push killed before its cleanup (SIGKILL)
    if removed:
        log.warning("%s", staging.cleaned_line(base_dir, removed))
    version = next_version(base_dir)
    staging_dir = os.path.join(base_dir, staging.staging_name(version, uuid.uuid4().hex[:8]))
    final = os.path.join(base_dir, str(version))
    try:
        copy_dir(model_dir, staging_dir)
        push_info = {**push_info, **(add_files(staging_dir, version) if add_files else {})}
        _write_push_info(staging_dir, push_info, version)
        if _is_local(base_dir):
            # Atomic on one POSIX filesystem. Another publisher that picked the same number and
            # renamed first makes it fail (ENOTEMPTY): take the next free number and rename again.
            while True:
                try:
                    os.rename(staging_dir, final)
                    break
                except OSError as error:
                    if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                version = next_version(base_dir)
                final = os.path.join(base_dir, str(version))
                _write_push_info(staging_dir, push_info, version)
        else:
            copy_tree(staging_dir, final)
            tf.io.gfile.rmtree(staging_dir)
    except BaseException:
        if tf.io.gfile.exists(staging_dir):
            tf.io.gfile.rmtree(staging_dir)
        raise
    return final


def _write_push_info(version_dir: str, push_info: dict[str, Any], version: int) -> None:
    with tf.io.gfile.GFile(os.path.join(version_dir, PUSH_INFO_FILE), "w") as handle:
        json.dump({**push_info, "version": version}, handle, indent=2, sort_keys=True)


def copy_tree(source: str, destination: str) -> None:
    """Copy every file under ``source`` (any filesystem ``tf.io.gfile`` has) to ``destination``,
    ``saved_model.pb`` last: a reader that waits for it (TF Serving) finds the rest in place."""
    files = [os.path.join(root, name) for root, _, names in tf.io.gfile.walk(source) for name in names]
    files.sort(key=lambda path: os.path.basename(path) == "saved_model.pb")
    for path in files:
        target = os.path.join(destination, os.path.relpath(path, source))
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(path, target, overwrite=True)


def read_push_info(version_dir: str) -> dict[str, Any]:
    """A version's ``push_info.json`` ({} when it has none); a damaged one is a ``UserFileError`` naming it."""
    path = os.path.join(version_dir, PUSH_INFO_FILE)
    what = "the Pusher's record of this version (JSON)"
    if "://" not in path:
        if not os.path.lexists(path):
            return {}
        info = read_user_json(path, flag=None, what=what, max_bytes=SMALL_JSON_MAX_BYTES)
    else:
        if not tf.io.gfile.exists(path):
            return {}
        try:
            with tf.io.gfile.GFile(path) as handle:
                info = json.loads(handle.read(SMALL_JSON_MAX_BYTES + 1))
        except ValueError as error:
            raise UserFileError(f"{path} is not valid JSON ({error}): replace it with a good copy.", path) from None
    if not isinstance(info, dict):
        raise UserFileError(f"{path} holds {type(info).__name__}, not a JSON object: replace it with a good copy "
                            "or delete it (the version stays servable without it).", path)
    return info


ROLLED_BACK_PREFIX = ".rolled-back-"


def _rolled_back_versions(base_dir: str) -> list[int]:
    """Versions moved aside by ``rollback`` (``.rolled-back-<version>[-<n>]``)."""
    found = []
    for name in _entries(base_dir):
        if name.startswith(ROLLED_BACK_PREFIX):
            number = version_number(name[len(ROLLED_BACK_PREFIX):].split("-", 1)[0])
            if number is not None:
                found.append(number)
    return found


def _free_rolled_back_name(base_dir: str, version: int) -> str:
    """``.rolled-back-<version>``, or with ``-2``, ``-3``... when an earlier rollback of a
    version with the same number (pushed before this module stopped reusing numbers) holds it."""
    taken = set(_entries(base_dir))
    name, count = f"{ROLLED_BACK_PREFIX}{version}", 1
    while name in taken:
        count += 1
        name = f"{ROLLED_BACK_PREFIX}{version}-{count}"
    return name


def rollback(base_dir: str) -> dict[str, int | str]:
    """Make the previous version the served one; returns {"from": v_new, "to": v_prev, "moved_to": name}.

    TF Serving's default version policy (``latest``) serves the highest numeric version,
    so the newest version is renamed out of the numeric namespace (to
    ``.rolled-back-<version>``, kept for inspection or restore) in one rename.
    """
    versions = list_versions(base_dir)
    if len(versions) < 2:
        raise ProjectError(f"Nothing to roll back to in {base_dir}: {len(versions)} version(s) pushed. "
                         "A rollback needs a previous version.")
    current, previous = versions[-1], versions[-2]
    moved_to = _free_rolled_back_name(base_dir, current)
    tf.io.gfile.rename(os.path.join(base_dir, str(current)), os.path.join(base_dir, moved_to), overwrite=False)
    return {"from": current, "to": previous, "moved_to": moved_to}

"""The TF Serving model base directory: ``<base>/<version>/saved_model.pb``.

TF Serving loads numeric version directories and, by default, serves the highest; this
module is the one reading of that layout, shared by the Pusher (atomic publish), the
Evaluator (the served baseline), ``predict`` and the ``models``/``rollback`` commands. It
is a storage layout, not a component, hence its place in ``data/``. Works on local paths
and object-store URIs alike (tf.io.gfile).
"""
from __future__ import annotations

import errno
import json
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from stackenv.errors import ProjectError

import tensorflow as tf


def list_versions(base_dir: str) -> list[int]:
    """Complete versions (numeric dirs holding saved_model.pb), oldest first."""
    if not base_dir or not tf.io.gfile.isdir(base_dir):
        return []
    versions = []
    for entry in tf.io.gfile.listdir(base_dir):
        name = entry.rstrip("/")
        if name.isdigit() and tf.io.gfile.exists(os.path.join(base_dir, name, "saved_model.pb")):
            versions.append(int(name))
    return sorted(versions)


def latest_version_dir(base_dir: str) -> str | None:
    """The version TF Serving would serve, or None if nothing was pushed yet."""
    versions = list_versions(base_dir)
    return os.path.join(base_dir, str(versions[-1])) if versions else None


PUSH_INFO_FILE = "push_info.json"
_STAGING_PREFIX = ".incomplete-"


def _is_local(path: str) -> bool:
    return "://" not in path


def next_version(base_dir: str, now: float | None = None) -> int:
    """A Unix-timestamp version, strictly above every existing one (TF Serving serves the highest)."""
    existing = list_versions(base_dir)
    return max(int(now if now is not None else time.time()), (existing[-1] + 1) if existing else 0)


def publish_version(model_dir: str, base_dir: str, push_info: dict[str, Any],
                    copy_dir: Callable[[str, str], None]) -> str:
    """Copy a SavedModel into ``base_dir`` as a new version, all or nothing.

    The copy goes to a hidden staging directory (TF Serving only loads numeric ones) and
    is renamed into place when complete, so a crash never leaves a partial version that
    TF Serving would try to load. On object stores, where a directory rename is a copy,
    ``saved_model.pb`` is copied last: loaders treat it as the sign a version is ready.
    """
    tf.io.gfile.makedirs(base_dir)
    version = next_version(base_dir)
    staging = os.path.join(base_dir, f"{_STAGING_PREFIX}{version}-{uuid.uuid4().hex[:8]}")
    final = os.path.join(base_dir, str(version))
    try:
        copy_dir(model_dir, staging)
        _write_push_info(staging, push_info, version)
        if _is_local(base_dir):
            # Atomic on one POSIX filesystem. Another publisher that picked the same number and
            # renamed first makes it fail (ENOTEMPTY): take the next free number and rename again.
            while True:
                try:
                    os.rename(staging, final)
                    break
                except OSError as error:
                    if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                        raise
                version = next_version(base_dir)
                final = os.path.join(base_dir, str(version))
                _write_push_info(staging, push_info, version)
        else:
            _copy_saved_model_pb_last(staging, final)
            tf.io.gfile.rmtree(staging)
    except BaseException:
        if tf.io.gfile.exists(staging):
            tf.io.gfile.rmtree(staging)
        raise
    return final


def _write_push_info(version_dir: str, push_info: dict[str, Any], version: int) -> None:
    with tf.io.gfile.GFile(os.path.join(version_dir, PUSH_INFO_FILE), "w") as handle:
        json.dump({**push_info, "version": version}, handle, indent=2, sort_keys=True)


def _copy_saved_model_pb_last(source: str, destination: str) -> None:
    files = [os.path.join(root, name) for root, _, names in tf.io.gfile.walk(source) for name in names]
    files.sort(key=lambda path: os.path.basename(path) == "saved_model.pb")
    for path in files:
        target = os.path.join(destination, os.path.relpath(path, source))
        tf.io.gfile.makedirs(os.path.dirname(target))
        tf.io.gfile.copy(path, target, overwrite=True)


def read_push_info(version_dir: str) -> dict[str, Any]:
    path = os.path.join(version_dir, PUSH_INFO_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


ROLLED_BACK_PREFIX = ".rolled-back-"


def rollback(base_dir: str) -> dict[str, int | None]:
    """Make the previous version the served one; returns {"from": v_new, "to": v_prev}.

    TF Serving's default version policy (``latest``) serves the highest numeric version,
    so the newest version is renamed out of the numeric namespace (to
    ``.rolled-back-<version>``, kept for inspection or restore) in one rename.
    """
    versions = list_versions(base_dir)
    if len(versions) < 2:
        raise ProjectError(f"Nothing to roll back to in {base_dir}: {len(versions)} version(s) pushed. "
                         "A rollback needs a previous version.")
    current, previous = versions[-1], versions[-2]
    tf.io.gfile.rename(os.path.join(base_dir, str(current)),
                       os.path.join(base_dir, f"{ROLLED_BACK_PREFIX}{current}"), overwrite=False)
    return {"from": current, "to": previous}

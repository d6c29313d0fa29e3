"""The TF Serving model base directory: ``<base>/<version>/saved_model.pb``.

TF Serving loads numeric version directories and, by default, serves the highest; this
module is the one reading of that layout (used by the Evaluator's baseline, predict, ...).
Works on local paths and object-store URIs alike (tf.io.gfile).
"""
import os
from typing import List, Optional

import tensorflow as tf


def list_versions(base_dir: str) -> List[int]:
    """Complete versions (numeric dirs holding saved_model.pb), oldest first."""
    if not base_dir or not tf.io.gfile.isdir(base_dir):
        return []
    versions = []
    for entry in tf.io.gfile.listdir(base_dir):
        name = entry.rstrip("/")
        if name.isdigit() and tf.io.gfile.exists(os.path.join(base_dir, name, "saved_model.pb")):
            versions.append(int(name))
    return sorted(versions)


def latest_version_dir(base_dir: str) -> Optional[str]:
    """The version TF Serving would serve, or None if nothing was pushed yet."""
    versions = list_versions(base_dir)
    return os.path.join(base_dir, str(versions[-1])) if versions else None

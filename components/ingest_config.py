"""What the project's ExampleGens share: settings in ExampleGen's ``custom_config``, the
source root an input pattern names, and the default input config.

The spec carries only a URI and these settings, so ``compile`` never reads the data; the
executor resolves the root at run time, after TFX's driver has replaced ``{SPAN}``.

Input layout: ``input_base`` is the data folder (or the parent of one TFRecord file); the
single input split's pattern selects the source root inside it. ``*`` (the default) means
``input_base`` itself and fingerprints its top-level entries; ``span-{SPAN}/*`` means the
newest ``span-N`` folder (or the span a range config asks for); a file name means that file.
"""
from __future__ import annotations

import posixpath
from typing import Any

from google.protobuf import json_format, struct_pb2
from tfx.proto import example_gen_pb2, range_config_pb2
from tfx.types import standard_component_specs

#: The pattern that means "the whole input_base" (TFX fingerprints what it matches).
WHOLE_FOLDER = "*"


def settings_config(**values: Any) -> example_gen_pb2.CustomConfig:
    """ExampleGen's ``custom_config`` carrying plain settings (``None`` values left out)."""
    struct = struct_pb2.Struct()
    struct.update({k: v for k, v in values.items() if v is not None})
    config = example_gen_pb2.CustomConfig()
    config.custom_config.Pack(struct)
    return config


def read_settings(exec_properties: dict[str, Any]) -> dict[str, Any]:
    """The settings :func:`settings_config` stored (whole numbers come back as ``int``)."""
    raw = exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY)
    if not raw:
        return {}
    config = example_gen_pb2.CustomConfig()
    json_format.Parse(raw, config) if isinstance(raw, str) else config.CopyFrom(raw)
    struct = struct_pb2.Struct()
    config.custom_config.Unpack(struct)
    values = json_format.MessageToDict(struct)
    return {k: int(v) if isinstance(v, float) and v.is_integer() else v for k, v in values.items()}


def source_root(input_base: str, pattern: str) -> str:
    """The folder or file a (span-resolved) split pattern names inside ``input_base``."""
    parts = [p for p in pattern.split("/") if p]
    if parts and parts[-1] == WHOLE_FOLDER:
        parts = parts[:-1]
    return posixpath.join(input_base, *parts) if parts else input_base


def input_layout(data: str, span_pattern: str | None) -> tuple[str, str]:
    """``(input_base, pattern)`` for a data URI, decided from the string alone (no access).

    A path ending in a TFRecord suffix is one file: its folder is the base and its name the
    pattern. ``span_pattern`` (e.g. ``span-{SPAN}``) names span folders inside ``data``.
    """
    from data.tfrecords import is_tfrecord_path

    data = data.rstrip("/") if "://" not in data or data.count("/") > 2 else data
    if span_pattern:
        return data, f"{span_pattern.strip('/')}/{WHOLE_FOLDER}"
    if is_tfrecord_path(data):
        base, name = posixpath.split(data)
        return base or ".", name
    return data, WHOLE_FOLDER


def range_config(spans: tuple[int, int] | None) -> range_config_pb2.RangeConfig | None:
    """A static span range (inclusive), or None for TFX's default: the newest span."""
    if spans is None:
        return None
    return range_config_pb2.RangeConfig(static_range=range_config_pb2.StaticRange(
        start_span_number=spans[0], end_span_number=spans[1]))


def tree_fingerprint(root: str) -> str:
    """Names, sizes and mtimes of every file below ``root`` (TFX's own fingerprint only stats
    what the split pattern matches: a class folder, whose mtime misses an image edited in place).
    Listed by ``data.walk``: a symlink loop, a fifo or an unreadable entry is named, never followed
    or opened."""
    import hashlib

    import tensorflow as tf

    from data import walk

    if not tf.io.gfile.isdir(root):
        return ""
    files, problems = walk.walk(root)
    digest = hashlib.sha256()
    for file in sorted(files, key=lambda f: f.uri):  # a name's own bytes, UTF-8 or not (walk.fs_bytes)
        digest.update(walk.fs_bytes(f"{file.uri}\0{file.size}\0{file.mtime_ns}\n"))
    for problem in sorted(problems, key=lambda p: p.uri):
        digest.update(walk.fs_bytes(f"{problem.uri}\0{problem.reason}\n"))
    return f"tree:files={len(files)},sha256={digest.hexdigest()}"

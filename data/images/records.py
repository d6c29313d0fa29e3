"""Source reader: TFRecord files already in the feature spec (a folder of them or one file).

Every record is checked against ``data.features``; the image shape comes from a
``manifest.json`` beside the files, else from the flags, else it is inferred.
"""
from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

from data import features
from data.errors import DataError
from data.manifest import MANIFEST_NAME, stored_image_shape
from data.tfrecords import iter_file_examples

log = logging.getLogger(__name__)


def record_labels(path: str) -> set[str]:
    """The class names in one TFRecord file, known before its images are converted.

    Why: a label id is the class's index in the sorted list of every class, and a TFRecord
    source names its classes only in its records. TensorFlow's parser reads just the label
    (it skips the image's bytes), so this costs the file's read and decompression, not a
    second conversion. A record out of spec is named by the full check."""
    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP" if path.lower().endswith(".gz") else "")
    spec = {features.LABEL: tf.io.VarLenFeature(tf.string)}
    labels = dataset.batch(1024).map(lambda batch: tf.io.parse_example(batch, spec)[features.LABEL].values)
    try:
        return {value.decode("utf-8") for values in labels.as_numpy_iterator() for value in values}
    except (tf.errors.OpError, UnicodeDecodeError):
        return {_parse_record(example, path, index)[0] for index, example in enumerate(iter_file_examples(path))}


def _parse_record(example: tf.train.Example, path: Path | str, index: int
                  ) -> tuple[str, str | None, np.ndarray]:
    feature = example.features.feature
    where = f"Record {index} of TFRecord file {path}"
    spec = (
        f"Each record needs '{features.IMAGE}' (int64 list of pixel values 0..255, HWC "
        f"order) and '{features.LABEL}' (bytes, the class name); see data/features.py."
    )
    image = feature.get(features.IMAGE)
    if image is None or image.WhichOneof("kind") != "int64_list" or not image.int64_list.value:
        found = "missing" if image is None else f"a {image.WhichOneof('kind')}"
        raise DataError(f"{where} has no usable '{features.IMAGE}' feature ({found}). {spec}")
    label = feature.get(features.LABEL)
    if label is None or label.WhichOneof("kind") != "bytes_list" or not label.bytes_list.value:
        raise DataError(f"{where} has no usable '{features.LABEL}' feature. {spec}")
    pixels = np.asarray(image.int64_list.value, dtype=np.int64)
    if pixels.min() < 0 or pixels.max() > 255:
        raise DataError(f"{where} has pixel values outside 0..255. {spec}")
    try:
        name = label.bytes_list.value[0].decode("utf-8")
        example_id = None
        if features.EXAMPLE_ID in feature and feature[features.EXAMPLE_ID].bytes_list.value:
            example_id = feature[features.EXAMPLE_ID].bytes_list.value[0].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{where} has a label or example_id that is not UTF-8 text. {spec}"
        ) from exc
    return name, example_id, pixels.astype(np.uint8)


def _source_shape(base: Path | str, length: int, image_size: int | None,
                  channels: int | None) -> tuple[int, int, int]:
    """[H, W, C] of TFRecord images: manifest.json beside them, else the flags, else inferred.

    ``base`` may be any ``tf.io.gfile`` URI (the ExampleGen reads buckets too)."""
    manifest_path = f"{str(base).rstrip('/')}/{MANIFEST_NAME}"
    if tf.io.gfile.exists(manifest_path) and not tf.io.gfile.isdir(manifest_path):
        try:
            with tf.io.gfile.GFile(manifest_path) as handle:
                shape = [int(v) for v in stored_image_shape(json.loads(handle.read()))]
        except (OSError, tf.errors.OpError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise DataError(
                f"{manifest_path} has no valid image_shape ({exc}). Fix or delete it; "
                "without it the shape is inferred or taken from --image-size/--channels."
            ) from exc
        if len(shape) != 3 or math.prod(shape) != length or min(shape) < 1:
            raise DataError(
                f"{manifest_path} gives image_shape {shape}, but the images in the "
                f"TFRecords have {length} values. Fix or delete the manifest."
            )
        return shape[0], shape[1], shape[2]
    for side, ch in _shape_candidates(length, image_size, channels):
        return side, side, ch
    raise DataError(
        f"Cannot tell the image shape of the TFRecords in {base}: images have {length} values, "
        "which is not a square with 1 or 3 channels. Pass --image-size and --channels "
        f"matching the stored images, or put a manifest.json with \"image_shape\": [H, W, C] "
        "beside the files."
    )


def _shape_candidates(length: int, image_size: int | None,
                      channels: int | None) -> Iterator[tuple[int, int]]:
    """(side, channels) pairs consistent with ``length``, the given flags first."""
    options = []
    if image_size and channels:
        options.append((image_size, channels))
    if channels:
        options.append((math.isqrt(length // channels), channels))
    if image_size:
        options.append((image_size, length // (image_size * image_size)))
    options += [(math.isqrt(length), 1), (math.isqrt(length // 3), 3)]
    for side, ch in options:
        # Only 1 or 3 channels: 8x8x3 read with --image-size 4 must not become 4x4x12.
        if side > 0 and ch in (1, 3) and side * side * ch == length:
            yield side, ch


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
from data.images.pixels import MODES, convert_array
from data.images.writer import FORMAT_VERSION, ImageSet
from data.manifest import MANIFEST_NAME, stored_image_shape
from data.prepare import SourcePlan, file_stats, source_fingerprint
from data.tfrecords import iter_file_examples

log = logging.getLogger(__name__)


def plan_tfrecords(root: Path, files: list[Path], image_size: int | None,
                   channels: int | None) -> SourcePlan[ImageSet]:
    base = root if root.is_dir() else root.parent

    def load(scratch: Path) -> ImageSet:
        return _load_tfrecords(base, files, scratch, image_size, channels)

    return SourcePlan(
        kind="tfrecord",
        description=f"TFRecord files {root}",
        fingerprint=source_fingerprint(
            FORMAT_VERSION,
            "tfrecord", size=image_size, channels=channels, root=str(root),
            files=file_stats(files, base),
        ),
        load=load,
        extra={"source_path": str(root)},
    )


def _load_tfrecords(base: Path, files: list[Path], scratch: Path, image_size: int | None,
                    channels: int | None) -> ImageSet:
    """Check every record and copy the raw pixels to a scratch file in one read."""
    labels, ids, units, length = [], [], [], None
    raw_path = scratch / "raw.u8"
    with open(raw_path, "wb") as raw_file:
        for path in files:
            for index, example in enumerate(iter_file_examples(path)):
                label, example_id, pixels = _parse_record(example, path, index)
                if length is None:
                    length = len(pixels)
                elif len(pixels) != length:
                    raise DataError(
                        f"Record {index} of TFRecord file {path} has an image of {len(pixels)} "
                        f"values, but earlier records have {length}. All images must have the "
                        "same shape: resize them to one size before writing the TFRecords."
                    )
                raw_file.write(pixels.tobytes())
                labels.append(label)
                units.append(path.relative_to(base).as_posix())
                ids.append(example_id or f"{units[-1]}/{index}")
    if not labels:
        raise DataError(
            f"The TFRecord files in {base} hold no records. Write the examples again, or "
            "point the source at the folder that holds the real data."
        )
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DataError(
            f"The TFRecord files in {base} have only one class ('{classes[0]}'), but a "
            "classifier needs at least two. Add examples of the other classes."
        )
    duplicates = len(ids) - len(set(ids))
    if duplicates:
        log.warning("%d duplicate example_id values in %s", duplicates, base)
    assert length is not None  # set by the first record, and there are records
    shape = _source_shape(base, length, image_size, channels)
    raw = np.memmap(raw_path, dtype=np.uint8, mode="r", shape=(len(labels), *shape))
    target = (image_size or shape[0], image_size or shape[1], channels or shape[2])
    if target == shape:
        return ImageSet(pixels=raw, labels=labels, ids=ids, classes=classes, units=units)
    if shape[2] not in MODES:
        raise DataError(
            f"Images in {base} have {shape[2]} channels, which cannot be resized or "
            "converted. Leave out --image-size and --channels to keep them as they are."
        )
    out = np.lib.format.open_memmap(
        scratch / "pixels.npy", mode="w+", dtype=np.uint8, shape=(len(labels), *target)
    )
    for i in range(len(labels)):
        out[i] = convert_array(np.asarray(raw[i]), target)
    return ImageSet(pixels=out, labels=labels, ids=ids, classes=classes, units=units)


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


"""Decoded images -> examples in the spec of ``data.features``, plus the manifest's facts.

Readers hand over an :class:`ImageSet`; :func:`convert` adds the brightness slice (the
rule the ExampleGen follows too: ``brightness.py``) and the label ids, and says how many
shards to write. ``data.prepare`` does the writing and caching.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from data import features
from data.errors import DataError
from data.images.brightness import bucket, image_means, sample_thresholds
from data.manifest import ImageFacts
from data.prepare import Conversion, shard_count

# Bump when the conversion changes in a way that changes the output for the same input
# (it is part of every fingerprint). 2: the manifest holds the image facts as a part.
# 3: brightness bounds from a sample of at most brightness.SAMPLE_SIZE images.
FORMAT_VERSION = 3
# Shards let Beam read in parallel (GZIP files cannot be split); ~64 MiB of pixels each.
_SHARD_PIXEL_BYTES = 64 << 20


@dataclasses.dataclass
class ImageSet:
    """Decoded images in their final shape, ready to be written."""

    pixels: np.ndarray  # (N, H, W, C) uint8; may be a disk-backed memmap
    labels: list[str]
    ids: list[str]
    classes: list[str]  # sorted
    # The unit (file, batch) each image was read from, named relative to the source, images
    # of a unit in their stored order: what the brightness sample is drawn by. None: each
    # image is its own unit, named by its id (a folder of image files).
    units: list[str] | None = None


def convert(images: ImageSet) -> Conversion:
    """The examples of ``images`` and the facts their manifest records."""
    if not len(images.labels):  # np.quantile below would fail with a bare IndexError
        raise DataError("The image source holds no images, so there is nothing to train on. Check --data: "
                        "a folder needs one sub-folder of PNG/JPEG images per class.")
    means = image_means(images.pixels)
    thresholds = sample_thresholds(means, images.ids if images.units is None else images.units)
    buckets = [bucket(mean, thresholds) for mean in means]
    counts, in_bucket = collections.Counter(images.labels), collections.Counter(buckets)
    return Conversion(
        examples=_examples(images, buckets),
        num_shards=shard_count(images.pixels.size, _SHARD_PIXEL_BYTES),
        image=ImageFacts(
            classes=images.classes,
            class_counts={c: counts.get(c, 0) for c in images.classes},
            image_shape=[int(v) for v in images.pixels.shape[1:]],
        ),
        extra={
            "brightness_thresholds": thresholds,
            "brightness_counts": {b: in_bucket.get(b, 0) for b in features.BRIGHTNESS_BUCKETS},
        },
    )


def _examples(images: ImageSet, buckets: list[str]) -> Iterator[tf.train.Example]:
    index = {name: i for i, name in enumerate(images.classes)}
    for i, label in enumerate(images.labels):
        yield make_example(images.pixels[i], label, index[label], buckets[i], images.ids[i])


def make_example(pixels: np.ndarray, label: str, label_id: int, brightness: str,
                 example_id: str) -> tf.train.Example:
    """One tf.train.Example in the spec of ``data.features`` (the parsed :func:`example_bytes`)."""
    return tf.train.Example.FromString(example_bytes(pixels, label, label_id, brightness, example_id))


def example_bytes(pixels: np.ndarray, label: str, label_id: int, brightness: str, example_id: str) -> bytes:
    """The serialized tf.train.Example of an image, as ``SerializeToString(deterministic=True)``
    writes it (features by name), written straight in protobuf's wire format.

    Why not build the message and serialize it: handing 784 Python ints to ``Int64List`` and
    serializing took a third of the image ExampleGen's time (docs/history/benchmarks-log.md, "Against TFX's
    own example"); here the pixels' varints are written by numpy in one pass.
    """
    values = {
        features.BRIGHTNESS: _bytes_feature(brightness.encode("utf-8")),
        features.EXAMPLE_ID: _bytes_feature(example_id.encode("utf-8")),
        features.IMAGE: _int64_feature(_pixel_varints(pixels)),
        features.LABEL: _bytes_feature(label.encode("utf-8")),
        features.LABEL_ID: _int64_feature(_varint(label_id)),
    }
    return _field(1, b"".join(_field(1, _MAP_KEYS[name] + _field(2, values[name])) for name in _MAP_ORDER))


def _varint(value: int) -> bytes:
    """A non-negative int in protobuf's base-128 varint encoding."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_ONE_BYTE = [bytes((value,)) for value in range(0x80)]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2): tag, length, payload."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


#: Each feature's map key, the entry's field 1.
_MAP_KEYS = {name: _field(1, name.encode("utf-8")) for name in features.ALL_FEATURES}


def _deterministic_map_order() -> tuple[str, ...]:
    """The order in which this protobuf's deterministic serialization writes the features map.

    Not plain sorted(): protobuf 3.20 (the tfx-1.16 stack) sorts the keys, upb (protobuf 6, tfx-1.21)
    puts a key after the longer keys it begins ("label_id" before "label"). Asked of protobuf itself
    once, so the bytes are the library's own on either stack.
    """
    names = (features.BRIGHTNESS, features.EXAMPLE_ID, features.IMAGE, features.LABEL, features.LABEL_ID)
    probe = tf.train.Example(features=tf.train.Features(feature={name: tf.train.Feature() for name in names}))
    written = probe.SerializeToString(deterministic=True)
    return tuple(sorted(names, key=lambda name: written.index(_MAP_KEYS[name])))


_MAP_ORDER = _deterministic_map_order()


def _bytes_feature(value: bytes) -> bytes:
    return _field(1, _field(1, value))  # Feature.bytes_list = BytesList(value=[value])


def _int64_feature(packed: bytes) -> bytes:
    return _field(3, _field(1, packed))  # Feature.int64_list = Int64List(value=...), packed


def _pixel_varints(pixels: np.ndarray) -> bytes:
    """uint8 values as packed varints: one byte below 128, two from 128 (low 7 bits | 0x80, then 1)."""
    values = np.asarray(pixels, dtype=np.uint8).ravel()
    high = values >= 0x80
    starts = np.arange(values.size) + np.cumsum(high) - high  # each value's first byte
    out = np.ones(values.size + int(np.count_nonzero(high)), dtype=np.uint8)  # a second byte is always 1
    out[starts] = np.where(high, values | 0x80, values)
    return out.tobytes()

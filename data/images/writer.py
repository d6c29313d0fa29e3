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
    """One tf.train.Example in the spec of ``data.features``."""
    def int64(values: list[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def text(value: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    return tf.train.Example(features=tf.train.Features(feature={
        features.IMAGE: int64(np.asarray(pixels, dtype=np.uint8).ravel().tolist()),
        features.LABEL: text(label),
        features.LABEL_ID: int64([label_id]),
        features.BRIGHTNESS: text(brightness),
        features.EXAMPLE_ID: text(example_id),
    }))

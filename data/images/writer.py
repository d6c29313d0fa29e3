"""Decoded images -> examples in the spec of ``data.features``, plus the manifest's facts.

Readers hand over an :class:`ImageSet`; :func:`convert` adds the brightness slice (image
mean pixel value in thirds of the data set) and the label ids, and says how many shards
to write. ``data.prepare`` does the writing and caching.
"""
from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterator

import numpy as np
import tensorflow as tf

from data import features
from data.errors import DataError
from data.manifest import ImageFacts
from data.prepare import Conversion, shard_count

# Bump when the conversion changes in a way that changes the output for the same input
# (it is part of every fingerprint). 2: the manifest holds the image facts as a part.
FORMAT_VERSION = 2
# Shards let Beam read in parallel (GZIP files cannot be split); ~64 MiB of pixels each.
_SHARD_PIXEL_BYTES = 64 << 20


@dataclasses.dataclass
class ImageSet:
    """Decoded images in their final shape, ready to be written."""

    pixels: np.ndarray  # (N, H, W, C) uint8; may be a disk-backed memmap
    labels: list[str]
    ids: list[str]
    classes: list[str]  # sorted


def convert(images: ImageSet) -> Conversion:
    """The examples of ``images`` and the facts their manifest records."""
    if not len(images.labels):  # np.quantile below would fail with a bare IndexError
        raise DataError("The image source holds no images, so there is nothing to train on. Check --data: "
                        "a folder needs one sub-folder of PNG/JPEG images per class.")
    means = _mean_intensities(images.pixels)
    thresholds = brightness_thresholds(means)
    buckets = np.where(means <= thresholds[0], 0, np.where(means <= thresholds[1], 1, 2))
    counts = collections.Counter(images.labels)
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
            "brightness_counts": {
                b: int((buckets == i).sum()) for i, b in enumerate(features.BRIGHTNESS_BUCKETS)
            },
        },
    )


def brightness_thresholds(means) -> list[float]:
    """The 1/3 and 2/3 quantiles of the per-image means: the brightness tertiles' bounds.

    Shared by this converter and the ExampleGen's Beam combiner, so both slice alike.
    """
    return [float(t) for t in np.quantile(np.asarray(means, dtype=np.float64), [1 / 3, 2 / 3])]


def brightness_bucket(mean: float, thresholds: list[float]) -> str:
    """``dark`` / ``medium`` / ``bright`` for an image of this mean pixel value."""
    index = 0 if mean <= thresholds[0] else 1 if mean <= thresholds[1] else 2
    return features.BRIGHTNESS_BUCKETS[index]


def _mean_intensities(pixels: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Per-image mean pixel value, in chunks so a disk-backed array is never copied whole."""
    means = np.empty(len(pixels), dtype=np.float64)
    for start in range(0, len(pixels), chunk):
        block = np.asarray(pixels[start:start + chunk])
        means[start:start + len(block)] = block.reshape(len(block), -1).mean(axis=1)
    return means


def _examples(images: ImageSet, buckets: np.ndarray) -> Iterator[tf.train.Example]:
    index = {name: i for i, name in enumerate(images.classes)}
    for i, label in enumerate(images.labels):
        yield make_example(
            images.pixels[i], label, index[label],
            features.BRIGHTNESS_BUCKETS[int(buckets[i])], images.ids[i],
        )


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

"""A split held in memory as its raw pixels, one byte each, when its transformed pixels would not fit.

Why: only a split in memory trains under the regime (models/common/regime.py: early stopping on held-out
train, ``STEPS_PER_EXECUTION`` steps per Keras call); a streamed one trains its whole step budget one step
per call. Transformed, a pixel is a float32 (four bytes); raw it is 0..255 (the data contract,
data/features.py), one byte. So the same in-memory budget holds four times the images: the 800,000 train
digits of a million hold 627 MB as bytes and 2.5 GB standardised (docs/history/benchmarks-log.md, "Raw
pixels in memory").

Each batch drawn for training is transformed through the transform graph (the one Transform saved and
serving applies) as it is gathered. The graph works per pixel, so the model reads the very values a
transformed split would have held.
"""
from collections.abc import Iterable, Mapping

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from models.cnn import features
from models.common.inputs import Transform

#: The key of the byte pixels in a split held this way (the raw feature's name: they are the raw values).
PIXELS = features.IMAGE
#: A loaded split: the tensors ``inputs.load_split(tensors=True)`` hands the Trainer, or arrays.
Split = Mapping[str, tf.Tensor | np.ndarray]


def reader(transform_output: tft.TFTransformOutput) -> tuple[dict[str, tf.io.FixedLenFeature], Transform]:
    """The raw spec to parse and the function to what a split holds: its pixels as uint8 and the
    transformed label (``inputs.load_split``'s two arguments)."""
    raw_spec = transform_output.raw_feature_spec()
    spec = {key: raw_spec[key] for key in features.RAW_INPUTS}
    layer = transform_output.transform_features_layer()

    def transform(raw: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        # Given the label alone, the graph computes only the outputs that depend on it.
        label = layer({features.LABEL: raw[features.LABEL]})[features.LABEL_XF]
        return {PIXELS: tf.cast(raw[features.IMAGE], tf.uint8), features.LABEL_XF: label}

    return spec, transform


def to_inputs(transform_output: tft.TFTransformOutput, keys: Iterable[str]) -> Transform:
    """Byte pixels (``{PIXELS: uint8}``) -> the transformed ``keys``, through the transform graph."""
    layer = transform_output.transform_features_layer()
    wanted = tuple(keys)

    def transform(held: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        transformed = layer({features.IMAGE: tf.cast(held[PIXELS], tf.int64)})
        return {key: transformed[key] for key in wanted}

    return transform


def holds_bytes(split: Split | None) -> bool:
    """Whether a loaded split holds byte pixels (``reader``) rather than transformed ones."""
    return split is not None and PIXELS in split


def rows(split: Split, indices: np.ndarray, transform: Transform) -> dict[str, np.ndarray]:
    """The examples at ``indices`` with their pixels transformed and the label: for what reads a sample of
    the split at once (the reference predictors)."""
    chosen = tf.constant(indices, tf.int64)
    pixels = transform({PIXELS: tf.gather(split[PIXELS], chosen)})
    return {**{key: value.numpy() for key, value in pixels.items()},
            features.LABEL_XF: np.asarray(split[features.LABEL_XF])[indices]}


def megabytes(split: Split) -> float:
    return sum(np.asarray(value).nbytes for value in split.values()) / 1e6

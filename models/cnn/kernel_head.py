"""A kernel head for small image sets: the CNN's features and the pixels, classified by an
RBF kernel machine fitted in closed form on all of train.

Why: on a few hundred images the softmax layer is fitted by gradient steps on 85% of train
and stopped on a small held-out part, while an RBF SVM on the bare pixels uses all of train
and a maximum-margin solution, and beat every CNN variant on the icons
(benchmarks/README.md, "A kernel head"). Kernel ridge regression on the CNN's last features
joined to the pixels keeps what the convolutions learned and fits like the SVM. It is kept
only where the held-out part of train does not prefer the softmax (``kept_above``); above
``MAX_CENTERS`` examples it would only see a subsample, so ``auto`` keeps the softmax there
(not measured: a bound on the head's size, not a finding).

The head is ordinary TensorFlow (distances to the stored train rows, ``exp``, a matrix
product, a softmax at a temperature fitted on the held-out part), so the exported SavedModel
needs nothing else to serve and its signatures are unchanged.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from models.cnn.hparams import KERNEL_HEAD_MODES
from models.common.warm_start import TRAINED_NETWORK

#: Train rows the head keeps as centres at most, and their size in floats at most (64 MB):
#: the head's memory and serving cost grow with both.
MAX_CENTERS = 3000
MAX_CENTER_FLOATS = 1 << 24
#: Ridge penalty; benchmarks/README.md, "A kernel head", measured 1e-3 to 1.
RIDGE = 1e-2
#: Floor on a feature's spread before it is standardised (ReLU features can be constant).
FEATURE_STD_FLOOR = 1e-3
TEMPERATURES = np.geomspace(1.0, 300.0, 40)


@dataclasses.dataclass
class KernelHeadReport:
    kept: bool
    why: str
    holdout_accuracy: float | None = None
    softmax_holdout_accuracy: float | None = None
    centers: int = 0
    dimensions: int = 0
    temperature: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class _Constants(tf.keras.layers.Layer):
    """A layer whose fitted numpy values become non-trainable weights (so the SavedModel holds them)."""

    def __init__(self, values: dict[str, np.ndarray | float], **kwargs):
        super().__init__(**kwargs)
        self._values = {name: np.asarray(value, np.float32) for name, value in values.items()}

    def build(self, input_shape):
        for name, value in self._values.items():
            setattr(self, name, self.add_weight(name=name, shape=value.shape, trainable=False,
                                                initializer=tf.keras.initializers.Constant(value)))
        super().build(input_shape)


class KernelHead(_Constants):
    """softmax(temperature * exp(-gamma * |z - c|^2) @ alpha) over the stored centres c."""

    def __init__(self, centers: np.ndarray, alpha: np.ndarray, gamma: float, temperature: float, **kwargs):
        super().__init__({"centers": centers, "alpha": alpha, "gamma": gamma, "temperature": temperature},
                         **kwargs)

    def call(self, z):
        squared = (tf.reduce_sum(z * z, axis=1, keepdims=True) + tf.reduce_sum(self.centers ** 2, axis=1)[None]
                   - 2.0 * tf.matmul(z, self.centers, transpose_b=True))
        scores = tf.matmul(tf.exp(-self.gamma * tf.maximum(squared, 0.0)), self.alpha)
        return tf.nn.softmax(self.temperature * scores)


class Standardise(_Constants):
    """(x - mean) / spread with the fitted rows' statistics, stored as constants."""

    def __init__(self, mean: np.ndarray, spread: np.ndarray, **kwargs):
        super().__init__({"mean": mean, "spread": spread}, **kwargs)

    def call(self, x):
        return (x - self.mean) / self.spread


def _kernel(a: np.ndarray, b: np.ndarray, gamma: float) -> np.ndarray:
    squared = (a * a).sum(1)[:, None] + (b * b).sum(1)[None] - 2.0 * a @ b.T
    return np.exp(-gamma * np.maximum(squared, 0.0))


def _solve(z: np.ndarray, labels: np.ndarray, num_classes: int, gamma: float) -> np.ndarray:
    gram = _kernel(z, z, gamma).astype(np.float64)
    gram[np.diag_indices_from(gram)] += RIDGE
    return np.linalg.solve(gram, np.eye(num_classes)[labels]).astype(np.float32)


def _fitted_temperature(scores: np.ndarray, labels: np.ndarray) -> float:
    """The softmax temperature with the lowest log loss on the held-out rows (argmax unchanged)."""
    def loss(t):
        logits = t * scores
        logits = logits - logits.max(1, keepdims=True)
        return -np.mean(logits[np.arange(len(labels)), labels] - np.log(np.exp(logits).sum(1)))
    return float(min(TEMPERATURES, key=loss))


def kept_above(softmax_accuracy: float, held_out: int) -> float:
    """The held-out accuracy the kernel head must reach: the softmax's minus one standard error.

    The comparison is tilted on purpose, because it is not even: the softmax's accuracy is
    the best of many checks of the same held-out part (early stopping kept that epoch), so it
    is optimistic, while the kernel head's is one measurement; and the head that is kept is
    refitted on all of train, held-out part included, which the softmax never sees. A
    softmax better by more than its own sampling error still wins (the glyphs:
    benchmarks/README.md, "A kernel head").
    """
    p = min(max(softmax_accuracy, 0.0), 1.0)
    return softmax_accuracy - float(np.sqrt(p * (1.0 - p) / max(1, held_out)))


def feature_model(model: tf.keras.Model) -> tf.keras.Model:
    """The trained network up to what its softmax layer reads (dropout is inactive here)."""
    return tf.keras.Model(model.inputs, model.get_layer("probabilities").input)


def fit_and_select(model: tf.keras.Model, pixels: np.ndarray, labels: np.ndarray, fit_idx: np.ndarray,
                   held_idx: np.ndarray, num_classes: int, softmax_holdout_accuracy: float | None,
                   mode: str = "auto", seed: int = 0, pixel_floor: float | None = None,
                   log: Callable[[str], None] | None = None) -> tuple[tf.keras.Model, KernelHeadReport]:
    """``model`` with a kernel head on its features and ``pixels`` (the model's input), or
    ``model`` itself, as ``mode`` and the held-out comparison decide.

    ``pixel_floor``: standardise the pixels per pixel first, with this floor on the spread
    (a model on a base model reads [0, 1] pixels; a CNN from scratch reads them standardised
    by Transform already, and passes None)."""
    if mode not in KERNEL_HEAD_MODES:
        raise ValueError(f"kernel_head must be one of {KERNEL_HEAD_MODES}, not {mode!r}")
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    pixels = np.asarray(pixels, np.float32).reshape(len(labels), -1)
    if mode == "off":
        return model, KernelHeadReport(kept=False, why="off")
    extractor = feature_model(model)
    dimensions = int(np.prod(extractor.output.shape[1:])) + pixels.shape[1]
    limit = max(1, min(MAX_CENTERS, MAX_CENTER_FLOATS // dimensions))
    if mode == "auto" and len(labels) > limit:
        return model, KernelHeadReport(kept=False, why=f"{len(labels)} train examples, more than the "
                                                        f"{limit} centres it may keep")
    learned = extractor.predict(pixels, batch_size=512, verbose=0).reshape(len(labels), -1)
    mean, spread = learned.mean(0), learned.std(0) + FEATURE_STD_FLOOR
    if pixel_floor is not None:
        pixel_mean, pixel_spread = pixels.mean(0), np.maximum(pixels.std(0), pixel_floor)
        pixels = (pixels - pixel_mean) / pixel_spread
    z = np.hstack([(learned - mean) / spread, pixels]).astype(np.float32)
    gamma = 1.0 / (z.shape[1] * max(float(z.var()), 1e-12))  # sklearn's gamma="scale"

    report = KernelHeadReport(kept=True, why=mode, softmax_holdout_accuracy=softmax_holdout_accuracy,
                              dimensions=int(z.shape[1]))
    temperature = float(TEMPERATURES[len(TEMPERATURES) // 2])
    if len(held_idx):
        scores = _kernel(z[held_idx], z[fit_idx], gamma) @ _solve(z[fit_idx], labels[fit_idx], num_classes, gamma)
        report.holdout_accuracy = float(np.mean(scores.argmax(1) == labels[held_idx]))
        temperature = _fitted_temperature(scores, labels[held_idx])
        # Rounded: the softmax's accuracy comes from Keras in float32.
        bar = kept_above(softmax_holdout_accuracy or 0.0, len(held_idx))
        if mode == "auto" and round(report.holdout_accuracy, 6) < round(bar, 6):
            report.kept, report.why = False, "the softmax head was better on the held-out part"
        elif mode == "auto":
            report.why = "within a standard error of the softmax head on the held-out part, or better"
    elif mode == "auto":
        report.kept, report.why = False, "no held-out part to compare on"
    if log:
        log(f"kernel head: held-out accuracy {_rounded(report.holdout_accuracy)} vs the softmax head's "
            f"{_rounded(softmax_holdout_accuracy)}: {'kept' if report.kept else 'not kept'} ({report.why})")
    if not report.kept:
        return model, report

    centers = np.sort(np.random.RandomState(seed).permutation(len(labels))[:limit])  # all rows when few
    alpha = _solve(z[centers], labels[centers], num_classes, gamma)
    report.centers, report.temperature = int(len(centers)), temperature
    pixel_input = tf.keras.layers.Flatten(name="pixels")(model.inputs[0])
    if pixel_floor is not None:
        pixel_input = Standardise(pixel_mean, pixel_spread, name="pixel_standardise")(pixel_input)
    joined = tf.keras.layers.Concatenate(name="kernel_inputs")(
        [Standardise(mean, spread, name="feature_standardise")(extractor.output), pixel_input])
    outputs = KernelHead(z[centers], alpha, gamma, temperature, name="probabilities_kernel")(joined)
    with_head = tf.keras.Model(model.inputs, outputs, name=f"{model.name}_kernel_head")
    # Tracked, so the export's checkpoint holds the whole trained network under one name and a
    # later --warm-start can restore it (models/common/warm_start.py).
    setattr(with_head, TRAINED_NETWORK, model)
    return with_head, report


def _rounded(accuracy: float | None) -> str:
    return "n/a" if accuracy is None else f"{accuracy:.4f}"

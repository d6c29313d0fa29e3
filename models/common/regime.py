"""Training length and class weighting decided by the data, not by a fixed epoch count.

- A stratified held-out part of TRAIN (never the eval split, which the Evaluator gates on)
  decides when to stop: the best epoch's weights are kept (``callbacks.BestWeights``).
- The held-out part is checked once per pass over the data, or every
  ``MIN_STEPS_PER_CHECK`` steps on small sets (``FitReport.steps_per_epoch``).
- Small sets get at least ``min_steps`` optimizer steps before stopping is allowed, and up
  to ``max_steps`` in all; patience is counted in steps, so it means the same on 500 or
  50,000 examples.
- Imbalanced classes: with ``class_weights="auto"`` the model is trained both without and
  with balanced class weights, and the better on the held-out part (its accuracy, the key
  metric) is kept; ``"on"``/``"off"`` force one.

Works on in-memory arrays (``inputs.load_split``); the chosen epoch and the comparison are
returned in a :class:`FitReport` that the Trainer writes next to the model.
"""
import dataclasses
import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf

from models.common.autograph import convert_tf_keras
from models.common.callbacks import BestWeights, StepCounter

#: Largest / smallest class count above which classes count as imbalanced.
IMBALANCE_RATIO = 1.5
#: A Keras "epoch" (one held-out check) is at least this many steps: on small sets a pass
#: over the data is a handful of steps, and a check per pass would cost more than training.
MIN_STEPS_PER_CHECK = 50


@dataclasses.dataclass
class FitReport:
    best_epoch: int                 # 1-based epoch whose weights were kept
    epochs_run: int
    steps_per_epoch: int
    stopped_early: bool
    holdout_examples: int
    holdout_accuracy: float | None
    class_weights: bool             # the kept model was trained with class weights
    class_weight_trials: dict[str, float | None] = dataclasses.field(default_factory=dict)
    #: Per epoch, as Keras' History: loss and accuracy on the fit part, ``val_`` ones on the held-out
    #: part; what the summary's advice reads (pipeline/results/advice.py: overfitting or underfitting).
    curves: dict[str, list[float]] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def holdout_split(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit, holdout) indices: ``fraction`` of every class held out, none of a class of one."""
    rng = np.random.RandomState(seed)
    fit: list[np.ndarray] = []
    held: list[np.ndarray] = []
    for value in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == value))
        count = int(math.floor(len(members) * fraction)) if len(members) > 1 else 0
        held.append(members[:count])
        fit.append(members[count:])
    return np.sort(np.concatenate(fit)), np.sort(np.concatenate(held))


def balanced_class_weights(labels: np.ndarray, num_classes: int) -> dict[int, float]:
    """n / (k * count) per class present (sklearn's "balanced"); absent classes weigh 1."""
    counts = np.bincount(labels.astype(np.int64), minlength=num_classes)
    present = counts > 0
    weights = np.ones(num_classes)
    weights[present] = len(labels) / (present.sum() * counts[present])
    return {i: float(w) for i, w in enumerate(weights)}


def is_imbalanced(labels: np.ndarray) -> bool:
    counts = np.bincount(labels.astype(np.int64))
    counts = counts[counts > 0]
    return len(counts) > 1 and counts.max() / counts.min() > IMBALANCE_RATIO


def _dataset(x: dict[str, np.ndarray], y: np.ndarray, batch_size: int, shuffle: bool, seed: int):
    data = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        data = data.shuffle(len(y), seed=seed, reshuffle_each_iteration=True).repeat()
        return data.batch(batch_size, drop_remainder=len(y) >= batch_size).prefetch(2)
    return data.batch(batch_size)


def fit_with_holdout(build_model: Callable[[], tf.keras.Model], x: dict[str, np.ndarray], y: np.ndarray,
                     *, batch_size: int, min_steps: int, max_steps: int, patience_steps: int,
                     holdout_fraction: float, class_weights: str = "auto", num_classes: int,
                     seed: int = 0, callbacks: list | None = None,
                     log: Callable[[str], None] | None = None) -> tuple[tf.keras.Model, FitReport]:
    """Train models from ``build_model`` on ``x``/``y`` and return the best one with its report."""
    # As TrainingSettings.fit: without it the first fit transpiles tf_keras and takes most of
    # a small Trainer's time (models/common/autograph.py, benchmarks/README.md).
    convert_tf_keras(False)
    y = np.asarray(y).reshape(-1)  # a [n, 1] label column (TFT's FixedLenFeature [1]) works too
    fit_idx, held_idx = holdout_split(y, holdout_fraction, seed)
    if len(held_idx) == 0:  # too few examples to hold any out: train the step budget
        fit_idx = np.arange(len(y))
    take = lambda idx: ({k: v[idx] for k, v in x.items()}, y[idx])  # noqa: E731
    x_fit, y_fit = take(fit_idx)
    budget = max(1, max_steps, min_steps)
    steps_per_epoch = min(budget, max(MIN_STEPS_PER_CHECK, math.ceil(len(fit_idx) / batch_size)))
    epochs = max(1, math.ceil(budget / steps_per_epoch))
    modes = {"on": [True], "off": [False]}.get(class_weights)
    if modes is None:  # auto
        modes = [False, True] if is_imbalanced(y_fit) and len(held_idx) else [False]

    steps = StepCounter(len(modes) * epochs * steps_per_epoch)  # the most it may run (early stopping ends sooner)
    best: tuple[float, tf.keras.Model, FitReport] | None = None
    trials: dict[str, float | None] = {}
    for weighted in modes:
        model = build_model()
        stopper: BestWeights | None = BestWeights(patience=max(1, math.ceil(patience_steps / steps_per_epoch)),
                                                  min_epochs=math.ceil(min_steps / steps_per_epoch))
        validation = _dataset(*take(held_idx), batch_size, False, seed) if len(held_idx) else None
        if validation is None:
            stopper = None
        history = model.fit(_dataset(x_fit, y_fit, batch_size, True, seed), epochs=epochs,
                  steps_per_epoch=steps_per_epoch, validation_data=validation,
                  class_weight=balanced_class_weights(y_fit, num_classes) if weighted else None,
                  callbacks=[c for c in [stopper, steps, *(callbacks or [])] if c is not None], verbose=0)
        accuracy = None
        if stopper:
            assert stopper.best is not None  # fit ran at least one validated epoch
            accuracy = float(stopper.best[0])
        report = FitReport(
            best_epoch=(stopper.best_epoch + 1) if stopper else epochs,
            epochs_run=stopper.epochs_run if stopper else epochs,
            steps_per_epoch=steps_per_epoch, stopped_early=bool(stopper and stopper.stopped_early),
            holdout_examples=int(len(held_idx)), holdout_accuracy=accuracy, class_weights=weighted,
            curves={key: [float(value) for value in values] for key, values in history.history.items()})
        trials["with_class_weights" if weighted else "without_class_weights"] = accuracy
        if log:
            log(f"{'with' if weighted else 'without'} class weights: best at step "
                f"{report.best_epoch * steps_per_epoch} of {report.epochs_run * steps_per_epoch} (checked every "
                f"{steps_per_epoch} steps), held-out accuracy "
                f"{accuracy if accuracy is None else round(accuracy, 4)} on {len(held_idx)} examples")
        if best is None or (accuracy or 0.0) > best[0]:  # ties keep the unweighted model
            best = (accuracy or 0.0, model, report)
    assert best is not None  # modes is never empty
    _, model, report = best
    report.class_weight_trials = trials
    return model, report

"""Training length, held-out checks and class weighting decided by the data, not by a fixed epoch count.

Every decision of the in-memory regime is made here, in :func:`schedule` and :func:`fit_with_holdout`:

- **In memory or streamed.** The train split is held in memory as arrays when its parsed inputs fit
  ``IN_MEMORY_BYTES`` (the CNN Trainer loads only the features it reads, and its raw pixels as bytes when
  their transformed floats do not fit: models/cnn/byte_pixels.py); above that it streams the step budget
  without early stopping (models/cnn/trainer.py).
- **Held-out part.** A stratified part of TRAIN (never the eval split, which the Evaluator gates on),
  ``holdout_fraction`` of it but at most ``MAX_HOLDOUT_EXAMPLES``, decides when to stop: the best
  check's weights are kept (``callbacks.BestWeights``). Past a few thousand examples a larger part
  only makes every check slower while its accuracy is already precise to a tenth of a point, and
  the examples it would take train the model instead.
- **Step budget, sub-linear in the data.** Up to the TrainArgs steps (``--epochs`` passes), but
  with the defaults at most ``STEPS_PER_SQRT_EXAMPLE * sqrt(fit examples)``: a bigger set gives
  more distinct examples per step, so fewer passes reach the same held-out accuracy, and a budget
  linear in the data (15 passes) made the Trainer the slowest step of a large run while its
  held-out accuracy had long flattened (docs/history/benchmarks-log.md, "Against TFX's own example").
  Small sets still get ``min_steps`` optimizer steps before stopping is allowed; ``--train-steps``
  trains exactly that budget (``scale_budget=False``).
- **Checks.** The held-out part is checked once per pass over the data, but (with the defaults)
  at least ``MIN_CHECKS`` times in the budget, and never more often than every ``MIN_STEPS_PER_CHECK``
  steps (``FitReport.steps_per_epoch``: a Keras "epoch" is one check). Patience is counted in
  steps, so it means the same on 500 or 50,000 examples, and from the last check that made
  progress the held-out part can resolve (``callbacks.BestWeights``: a gain of more than a standard
  error); the best check's weights are kept either way.
- **Imbalanced classes**: with ``class_weights="auto"`` the model is trained both without and
  with balanced class weights, and the better on the held-out part (its accuracy, the key
  metric) is kept; ``"on"``/``"off"`` force one.
- **Input**: the arrays are fed by tf.data with autotuning off (``_dataset`` says why); a family's model
  compiled for this regime runs ``STEPS_PER_EXECUTION`` steps per call.

One data-driven choice is made beside the math it bounds, after this regime has kept its model: the
CNN's kernel head (``models/cnn/kernel_head.fit_and_select``) is tried only when train fits its
centres (at most ``MAX_CENTERS`` rows) and kept only where the held-out part does not prefer the softmax.

The chosen check and the comparison are returned in a :class:`FitReport` that the Trainer writes
next to the model.
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
#: Held-out checks in a step budget at least (a pass over a large set is a large part of its budget).
MIN_CHECKS = 8
#: The held-out part of train holds at most this many examples.
MAX_HOLDOUT_EXAMPLES = 5000
#: The default step budget's scale: this many steps per square root of the fit examples.
STEPS_PER_SQRT_EXAMPLE = 8
#: Parsed train inputs up to this size are held in memory for the regime (larger: streamed).
IN_MEMORY_BYTES = 1 << 30
#: Batch size of the held-out checks (forward passes only: larger batches, fewer Python steps).
CHECK_BATCH = 256
#: Optimizer steps Keras runs per call of its train function (``compile(steps_per_execution=...)``) when a
#: family trains in memory: the same steps on the same batches, with Keras' Python work per step (callbacks,
#: logs, the call itself) paid once per run of them, a large share of a small CNN's step on a CPU
#: (benchmarks/bench_steps_per_call.py; docs/history/benchmarks-log.md, "Keras runs the CNN's steps 16 per
#: call"). Checks still fall at the end of each epoch, which Keras cuts a run at.
STEPS_PER_EXECUTION = 16


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
    step_budget: int = 0            # the most steps a trial could train (schedule())

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


def stopping_holdout(labels: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit, holdout) indices of the held-out part that stops training: ``holdout_split`` with at most
    ``MAX_HOLDOUT_EXAMPLES`` held out (a later decision on the same part, the kernel head, calls this too)."""
    labels = np.asarray(labels).reshape(-1)
    return holdout_split(labels, min(fraction, MAX_HOLDOUT_EXAMPLES / max(1, len(labels))), seed)


@dataclasses.dataclass(frozen=True)
class Schedule:
    """How long one trial trains and how often it is checked (see the module docstring)."""

    budget: int           # optimizer steps at most
    steps_per_check: int  # a Keras "epoch"
    epochs: int           # checks at most
    patience: int         # checks without improvement before stopping
    min_epochs: int       # checks before stopping is allowed


def schedule(fit_examples: int, batch_size: int, *, min_steps: int, max_steps: int, patience_steps: int,
             scale_budget: bool = True) -> Schedule:
    """The step budget and the held-out checks for ``fit_examples`` examples in batches of ``batch_size``."""
    budget = max(1, max_steps, min_steps)
    if scale_budget:
        budget = min(budget, max(1, min_steps, math.ceil(STEPS_PER_SQRT_EXAMPLE * math.sqrt(fit_examples))))
    one_pass = math.ceil(fit_examples / batch_size)
    if scale_budget:
        one_pass = min(one_pass, math.ceil(budget / MIN_CHECKS))
    every = min(budget, max(MIN_STEPS_PER_CHECK, one_pass))
    return Schedule(budget=budget, steps_per_check=every, epochs=max(1, math.ceil(budget / every)),
                    patience=max(1, math.ceil(patience_steps / every)), min_epochs=math.ceil(min_steps / every))


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


def _dataset(x: dict[str, tf.Tensor], y: tf.Tensor, indices: np.ndarray, batch_size: int, shuffle: bool, seed: int,
             transform: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]] | None = None):
    """The examples at ``indices``: shuffled batches forever (the fit part) or each once (the held-out part),
    not autotuned; ``transform`` maps each gathered batch of ``x`` to the model's inputs.

    The indices are shuffled and batched, and each batch gathered from the whole split: the batches a
    dataset of the examples themselves would give (a shuffle's order depends only on its seed and the
    number of elements), without copying the split's part twice first (numpy's fancy index, then
    ``from_tensor_slices``: about 2 s of a 160,000-digit Trainer, docs/history/benchmarks-log.md,
    "Two files a split"), nor moving each image through tf.data one by one.

    Autotuning off: an autotuned iterator's model thread sleeps through an optimisation period that
    grows to a minute, and destroying the iterator waits for that sleep to end. Keras leaves the training
    iterator to Python's garbage collector, so after a fit of a minute or more whatever ran at the next
    collection stalled for up to a minute (it was the export). Nothing here is tuned (the prefetch depth
    is fixed), so turning it off changes no batch."""
    data = tf.data.Dataset.from_tensor_slices(indices.astype(np.int64))
    if shuffle:
        data = data.shuffle(len(indices), seed=seed, reshuffle_each_iteration=True).repeat()
        data = data.batch(batch_size, drop_remainder=len(indices) >= batch_size)
    else:
        data = data.batch(batch_size)
    def gather(batch):
        inputs = {key: tf.gather(value, batch) for key, value in x.items()}
        return (transform(inputs) if transform else inputs), tf.gather(y, batch)

    data = data.map(gather)
    if shuffle:
        data = data.prefetch(2)
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)


def fit_with_holdout(build_model: Callable[[], tf.keras.Model], x: dict[str, np.ndarray], y: np.ndarray,
                     *, batch_size: int, min_steps: int, max_steps: int, patience_steps: int,
                     holdout_fraction: float, class_weights: str = "auto", num_classes: int,
                     seed: int = 0, callbacks: list | None = None, scale_budget: bool = True,
                     log: Callable[[str], None] | None = None,
                     transform: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]] | None = None,
                     ) -> tuple[tf.keras.Model, FitReport]:
    """Train models from ``build_model`` on ``x``/``y`` and return the best one with its report.

    ``max_steps``: the TrainArgs steps; ``scale_budget=False`` (``--train-steps``) trains up to exactly
    that many, else :func:`schedule` may cap them. ``transform``: ``x`` holds what the model's inputs are
    computed from, batch by batch (models/cnn/byte_pixels.py), not the inputs themselves."""
    # As TrainingSettings.fit: without it the first fit transpiles tf_keras and takes most of
    # a small Trainer's time (models/common/autograph.py, benchmarks/README.md).
    convert_tf_keras(False)
    y = np.asarray(y).reshape(-1)  # a [n, 1] label column (TFT's FixedLenFeature [1]) works too
    fit_idx, held_idx = stopping_holdout(y, holdout_fraction, seed)
    if len(held_idx) == 0:  # too few examples to hold any out: train the step budget
        fit_idx = np.arange(len(y))
    y_fit = y[fit_idx]
    # The whole split once as tensors (those of inputs.load_split(tensors=True) are not copied; an array is); each
    # dataset gathers its part batch by batch.
    x_all, y_all = {k: tf.convert_to_tensor(v) for k, v in x.items()}, tf.convert_to_tensor(y)
    plan = schedule(len(fit_idx), batch_size, min_steps=min_steps, max_steps=max_steps,
                    patience_steps=patience_steps, scale_budget=scale_budget)
    steps_per_epoch, epochs = plan.steps_per_check, plan.epochs
    modes = {"on": [True], "off": [False]}.get(class_weights)
    if modes is None:  # auto
        modes = [False, True] if is_imbalanced(y_fit) and len(held_idx) else [False]

    steps = StepCounter(len(modes) * epochs * steps_per_epoch)  # the most it may run (early stopping ends sooner)
    best: tuple[float, tf.keras.Model, FitReport] | None = None
    trials: dict[str, float | None] = {}
    for weighted in modes:
        model = build_model()
        stopper: BestWeights | None = BestWeights(patience=plan.patience, min_epochs=plan.min_epochs,
                                                  holdout_examples=len(held_idx))
        validation = (_dataset(x_all, y_all, held_idx, max(batch_size, CHECK_BATCH), False, seed, transform)
                      if len(held_idx) else None)
        if validation is None:
            stopper = None
        history = model.fit(_dataset(x_all, y_all, fit_idx, batch_size, True, seed, transform), epochs=epochs,
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
            step_budget=plan.budget,
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

"""Keras callbacks shared by the model families."""
import logging
import math
import time

from stackenv import progress

import tensorflow as tf


class EpochLogger(tf.keras.callbacks.Callback):
    """One log line per epoch, so a pipeline run shows training progress without Keras bars."""

    def __init__(self, logger: logging.Logger, epochs: int):
        super().__init__()
        self._log = logger
        self._epochs = epochs
        self._started = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        metrics = "  ".join(f"{k} {v:.4f}" for k, v in sorted((logs or {}).items()))
        self._log.info("epoch %d/%d  %s  (%.1f s)", epoch + 1, self._epochs, metrics,
                       time.monotonic() - self._started)


class _CountsSteps(tf.keras.callbacks.Callback):
    """Counts optimizer steps, not calls: Keras calls ``on_train_batch_end`` once per run of steps with
    ``steps_per_execution``, passing the run's last step index in the epoch (tf_keras ``fit``: ``end_step``)."""

    def __init__(self):
        super().__init__()
        self._in_epoch = 0
        self._supports_tf_logs = True  # the logs are not read: Keras need not copy them to numpy each step

    def on_epoch_begin(self, epoch, logs=None):
        self._in_epoch = 0

    def _new_steps(self, batch: int) -> int:
        """The steps this call ran (``batch``: the last one's index in the epoch)."""
        new, self._in_epoch = batch + 1 - self._in_epoch, batch + 1
        return new


class StepCounter(_CountsSteps):
    """Training steps done, of ``total``, for the runner's live progress line (``stackenv.progress``)."""

    def __init__(self, total: int):
        super().__init__()
        self._total = total

    def on_train_batch_end(self, batch, logs=None):
        progress.count("training steps", self._new_steps(batch), total=self._total)

    def on_train_end(self, logs=None):
        # The count is written at most once a second: without this the line kept showing the steps of the last
        # write (485 of 500) through whatever the Trainer does next (fitting the served mix, the export).
        progress.flush()


class StopAtStep(_CountsSteps):
    """End training after exactly ``total`` optimizer steps: ``--train-steps`` split into ``epochs`` epochs of
    ``ceil(total / epochs)`` steps would otherwise run up to ``epochs - 1`` more (20 steps in 8 epochs ran 24).
    tf_keras checks ``stop_training`` after every call; the epoch's end (validation, logs) still runs."""

    def __init__(self, total: int):
        super().__init__()
        self._total = total
        self._done = 0

    def on_train_batch_end(self, batch, logs=None):
        self._done += self._new_steps(batch)
        if self._done >= self._total:
            self.model.stop_training = True


class StopAfterSeconds(_CountsSteps):
    """End training once ``seconds`` of it have passed, after the step that crossed them.

    A step budget is a time budget only on the machine it was sized on: the text model's steps ran at less than
    half the rate on a second 2-core machine (docs/history/benchmarks-log.md, "A time budget for the text
    model"). Keras still ends the cut epoch (validation, then ``BestWeights``),
    so the weights kept are the best check's, the cut one's included. Not for multi-worker training: each
    worker would decide at its own step, and the collective ops of one that went on would wait for ever.
    """

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds
        self.steps = 0
        self.reached = False
        self._started = time.monotonic()

    def on_train_begin(self, logs=None):
        self._started = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self.steps += self._new_steps(batch)
        if not self.reached and time.monotonic() - self._started >= self.seconds:
            self.reached = True
            self.model.stop_training = True


class BestWeights(tf.keras.callbacks.Callback):
    """Early stopping that always ends on the best epoch's weights.

    Keras' ``EarlyStopping(restore_best_weights=True)`` restores at the end of training too,
    but ignores every epoch before ``start_from_epoch`` (tf_keras/src/callbacks.py,
    ``on_epoch_end``@2.16), so holding off stopping also forgets a best epoch in that span,
    and it breaks no ties. This tracks every epoch, may stop only after ``min_epochs``, and
    restores the best weights however training ends. Best = the highest ``monitor`` (an
    accuracy), ties broken by the lower ``tie_breaker`` (a loss).

    Patience counts the epochs since the last one that made progress. Without ``holdout_examples``
    that is every new best. With it (``monitor`` an accuracy on that many held-out examples),
    progress is a gain the held-out part can resolve: more than one standard error of the last
    progress' accuracy on those examples. A smaller gain, or a lower loss alone, still gives the
    kept weights, but it no longer buys another ``patience`` epochs: waiting on gains of a few
    examples in thousands trained large sets up to half again as long, for an accuracy the same
    within its interval (docs/history/benchmarks-log.md, "Progress the held-out part can resolve").
    """

    def __init__(self, monitor: str = "val_accuracy", tie_breaker: str = "val_loss",
                 patience: int = 10, min_epochs: int = 0, holdout_examples: int | None = None):
        super().__init__()
        self.monitor, self.tie_breaker = monitor, tie_breaker
        self.patience, self.min_epochs = patience, min_epochs
        self.holdout_examples = holdout_examples
        self.best_epoch = -1
        self.best: tuple[float, float] | None = None  # (monitor, -tie_breaker) of the best epoch
        self.epochs_run = 0
        self.stopped_early = False
        self._weights = None
        self._progress: tuple[float, int] | None = None  # (monitor, epoch) of the last progress

    def _made_progress(self, value: float, epoch: int, last: float) -> bool:
        """Whether ``epoch`` (``value``) made progress since the last progress (``last``)."""
        if not self.holdout_examples:
            return epoch == self.best_epoch
        return value > last + math.sqrt(max(0.0, last * (1.0 - last)) / self.holdout_examples)

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        self.epochs_run = epoch + 1
        value = float(logs[self.monitor])
        score = (value, -float(logs.get(self.tie_breaker, 0.0)))
        if self.best is None or score > self.best:
            self.best, self.best_epoch = score, epoch
            self._weights = self.model.get_weights()
        if self._progress is None or self._made_progress(value, epoch, self._progress[0]):
            self._progress = (value, epoch)
        elif epoch + 1 >= self.min_epochs and epoch - self._progress[1] >= self.patience:
            self.stopped_early = True
            self.model.stop_training = True

    def on_train_end(self, logs=None):
        if self._weights is not None:
            self.model.set_weights(self._weights)

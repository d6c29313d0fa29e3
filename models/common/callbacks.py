"""Keras callbacks shared by the model families."""
import logging
import time

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

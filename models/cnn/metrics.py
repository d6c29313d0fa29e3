"""Metrics that survive class imbalance, as Keras metrics so TFMA computes them per slice.

TFMA instantiates them from ``MetricConfig(class_name=..., module="models.cnn.metrics",
config='{"num_classes": N}')``. Both accumulate one confusion matrix of argmax predictions
(additive, so TFMA's partial results merge exactly) and average over the classes PRESENT
in the slice's labels:

- ``MeanClassRecall`` (reported as ``balanced_accuracy``): the mean per-class recall
  (macro recall). Always answering the largest class scores 1/k, however imbalanced;
- ``MacroF1``: the mean per-class F1.
"""
import tensorflow as tf


class _ConfusionMetric(tf.keras.metrics.Metric):
    def __init__(self, num_classes: int, name: str, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.num_classes = int(num_classes)
        self.matrix = self.add_weight(name="confusion", shape=(self.num_classes, self.num_classes),
                                      initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        """``y_true`` [batch] or [batch, 1] class ids; ``y_pred`` [batch, classes] probabilities."""
        labels = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        predicted = tf.argmax(tf.reshape(y_pred, [tf.size(labels), -1]), axis=-1)
        weights = None if sample_weight is None else tf.reshape(tf.cast(sample_weight, self.dtype), [-1])
        self.matrix.assign_add(tf.math.confusion_matrix(labels, predicted, self.num_classes,
                                                        weights=weights, dtype=self.dtype))

    def _per_class(self):
        true_positives = tf.linalg.diag_part(self.matrix)
        support = tf.reduce_sum(self.matrix, axis=1)     # labels per class
        predicted = tf.reduce_sum(self.matrix, axis=0)   # predictions per class
        return true_positives, support, predicted, tf.cast(support > 0, self.dtype)

    def reset_state(self):
        self.matrix.assign(tf.zeros_like(self.matrix))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


def _mean_over(values, present):
    return tf.math.divide_no_nan(tf.reduce_sum(values * present), tf.reduce_sum(present))


class MeanClassRecall(_ConfusionMetric):
    """Balanced accuracy (not named BalancedAccuracy: TFMA resolves that name to its binary metric)."""

    def __init__(self, num_classes: int = 2, name: str = "balanced_accuracy", **kwargs):
        super().__init__(num_classes, name, **kwargs)

    def result(self):
        true_positives, support, _, present = self._per_class()
        return _mean_over(tf.math.divide_no_nan(true_positives, support), present)


class MacroF1(_ConfusionMetric):
    def __init__(self, num_classes: int = 2, name: str = "macro_f1", **kwargs):
        super().__init__(num_classes, name, **kwargs)

    def result(self):
        true_positives, support, predicted, present = self._per_class()
        return _mean_over(tf.math.divide_no_nan(2.0 * true_positives, support + predicted), present)

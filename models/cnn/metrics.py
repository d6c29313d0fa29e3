"""Metrics that survive class imbalance, as Keras metrics so TFMA computes them per slice.

TFMA instantiates them from ``MetricConfig(class_name=..., module="models.cnn.metrics",
config='{"num_classes": N}')``. Both accumulate one confusion matrix of argmax predictions
(additive, so TFMA's partial results merge exactly) and average over the classes PRESENT
in the slice's labels:

- ``MeanClassRecall`` (reported as ``balanced_accuracy``): the mean per-class recall
  (macro recall). Always answering the largest class scores 1/k, however imbalanced;
- ``MacroF1``: the mean per-class F1.

``PerClassPrecisionRecall`` is a TFMA metric: each class's precision and recall at 0.5.
"""
import collections

import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.metrics import metric_types, metric_util, multi_class_confusion_matrix_metrics


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


class PerClassPrecisionRecall(tfma.metrics.Metric):
    """Precision and recall of every class at 0.5: TFMA's binarized ``Precision`` / ``Recall``
    (same keys: ``precision`` / ``recall`` under sub key ``classId:k``, same values), from ONE
    multi-class confusion matrix per slice instead of one binary matrix per class.

    Why: TFMA's binarized metrics walk every example once per class and slice in Python,
    which was most of the Evaluator's time (docs/benchmarks.md, "At scale"). Same values:
    class k counts as predicted when its probability is > 0.5, and with probabilities that
    sum to 1 that happens exactly when k is the top class and its probability is > 0.5,
    which is the multi-class matrix's predicted class at threshold 0.5.
    """

    def __init__(self, num_classes: int = 2, name: str = "per_class_precision_recall"):
        super().__init__(metric_util.merge_per_key_computations(_per_class_computations),
                         num_classes=num_classes, name=name)


def _per_class_computations(num_classes: int, name: str, eval_config=None, model_name: str = "",
                            output_name: str = "", example_weighted: bool = False):
    matrices = multi_class_confusion_matrix_metrics.multi_class_confusion_matrices(
        thresholds=[_THRESHOLD], name=f"_{name}_matrices", eval_config=eval_config, model_name=model_name,
        output_name=output_name, example_weighted=example_weighted)
    matrices_key = matrices[-1].keys[-1]

    def key(metric: str, class_id: int):
        return metric_types.MetricKey(name=metric, model_name=model_name, output_name=output_name,
                                      sub_key=metric_types.SubKey(class_id=class_id), example_weighted=example_weighted)

    keys = {k: (key("precision", k), key("recall", k)) for k in range(int(num_classes))}

    def result(metrics):
        hits, predicted, actual = [collections.Counter() for _ in range(3)]
        for entry, weight in metrics[matrices_key][_THRESHOLD].items():
            actual[entry.actual_class_id] += weight
            predicted[entry.predicted_class_id] += weight  # NO_PREDICTED_CLASS_ID (-1): below 0.5
            if entry.actual_class_id == entry.predicted_class_id:
                hits[entry.actual_class_id] += weight
        out = {}
        for k, (precision, recall) in keys.items():
            out[precision] = hits[k] / predicted[k] if predicted[k] else float("nan")
            out[recall] = hits[k] / actual[k] if actual[k] else float("nan")
        return out

    return [*matrices, metric_types.DerivedMetricComputation(
        keys=[k for pair in keys.values() for k in pair], result=result)]


_THRESHOLD = 0.5

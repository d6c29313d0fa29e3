"""The CNN's Evaluator metrics, TFMA-native and all read from ONE confusion matrix pass per slice.

TFMA instantiates them from ``MetricConfig(class_name=..., module="models.cnn.metrics")``:

- ``ArgmaxAccuracy`` (reported as ``sparse_categorical_accuracy``, the Keras metric's name and
  value: the top class is the label, first index on ties as ``tf.argmax``);
- ``MeanClassRecall`` (reported as ``balanced_accuracy``): the mean per-class recall over
  the classes PRESENT in the slice's labels (macro recall). Always answering the largest class
  scores 1/k, however imbalanced; not named BalancedAccuracy: TFMA resolves that name to its
  binary metric;
- ``MacroF1``: the mean per-class F1 over the classes present;
- ``PerClassPrecisionRecall``: each class's precision and recall at 0.5, TFMA's binarized
  ``Precision`` / ``Recall`` (same keys: ``precision`` / ``recall`` under sub key
  ``classId:k``, same values). Class k counts as predicted when its probability is > 0.5; with
  probabilities that sum to 1 that happens exactly when k is the top class and its probability
  is > 0.5, which is the multi-class matrix's predicted class at threshold 0.5.

Each is a derived computation over TFMA's multi-class confusion matrices at
:data:`MATRIX_THRESHOLDS` (0.0: the top class; 0.5), the same matrices the
``MultiClassConfusionMatrixPlot`` draws when configured with :func:`plot_config`. TFMA
de-duplicates computations with the same keys and combiner (``metrics_plots_and_validations_
evaluator._filter_and_separate_computations``, TFMA 0.47), so the plot and the four metrics are
one combiner. Why: TFMA walks every example once per combiner and slice in Python; Keras metrics
and a matrix per threshold were four walks, most of the Evaluator's time (docs/history/benchmarks-log.md,
"Against TFX's own example").
"""
import collections
import json
import math
from collections.abc import Callable

from stackenv.tfma import tfma

from tensorflow_model_analysis.metrics import metric_types, metric_util, multi_class_confusion_matrix_metrics

#: The thresholds of the one set of matrices every metric and the plot read: 0.0 gives the top
#: class (softmax probabilities are never 0), 0.5 the binarized metrics' predicted class.
MATRIX_THRESHOLDS = (0.0, 0.5)
_TOP_CLASS, _ABOVE_HALF = MATRIX_THRESHOLDS


def plot_config() -> tfma.MetricConfig:
    """TFMA's confusion matrix plot on the metrics' matrices (so it adds no pass of its own)."""
    return tfma.MetricConfig(class_name="MultiClassConfusionMatrixPlot",
                             config=json.dumps({"thresholds": list(MATRIX_THRESHOLDS)}))


#: Per class: hits, predicted, actual (weights).
ClassCounts = tuple["collections.Counter[int]", "collections.Counter[int]", "collections.Counter[int]"]


def class_counts(matrix: dict) -> ClassCounts:
    """Per class: examples right, predicted as it, labelled as it (weighted), from one matrix
    ({MatrixEntryKey(actual, predicted): weight}; predicted -1: no class above the threshold)."""
    hits: collections.Counter[int] = collections.Counter()  # Counters of weights, not only counts
    predicted: collections.Counter[int] = collections.Counter()
    actual: collections.Counter[int] = collections.Counter()
    for entry, weight in matrix.items():
        actual[entry.actual_class_id] += weight
        predicted[entry.predicted_class_id] += weight
        if entry.actual_class_id == entry.predicted_class_id:
            hits[entry.actual_class_id] += weight
    return hits, predicted, actual


def _mean_over_present(per_class: Callable[[int], float], actual: "collections.Counter[int]") -> float:
    present = [k for k, weight in actual.items() if weight > 0]
    return sum(per_class(k) for k in present) / len(present) if present else float("nan")


def _accuracy(counts: ClassCounts) -> float:
    hits, _, actual = counts
    total = sum(actual.values())
    return sum(hits.values()) / total if total else float("nan")


def _balanced_accuracy(counts: ClassCounts) -> float:
    hits, _, actual = counts
    return _mean_over_present(lambda k: hits[k] / actual[k], actual)


def _macro_f1(counts: ClassCounts) -> float:
    hits, predicted, actual = counts
    return _mean_over_present(lambda k: 2.0 * hits[k] / (actual[k] + predicted[k]), actual)


def _matrices(eval_config, model_name: str, output_name: str, example_weighted: bool):
    """TFMA's matrices computation under its default name: the plot's, when thresholds agree."""
    computations = multi_class_confusion_matrix_metrics.multi_class_confusion_matrices(
        thresholds=list(MATRIX_THRESHOLDS), eval_config=eval_config, model_name=model_name,
        output_name=output_name, example_weighted=example_weighted)
    return computations, computations[-1].keys[-1]


def _scalar_computations(score: Callable[[ClassCounts], float]):
    def computations(name: str, num_classes: int = 0, eval_config=None, model_name: str = "",
                     output_name: str = "", example_weighted: bool = False):
        matrices, matrices_key = _matrices(eval_config, model_name, output_name, example_weighted)
        own = metric_types.MetricKey(name=name, model_name=model_name, output_name=output_name,
                                     example_weighted=example_weighted)

        def result(metrics) -> dict:
            return {own: score(class_counts(metrics[matrices_key][_TOP_CLASS]))}

        return [*matrices, metric_types.DerivedMetricComputation(keys=[own], result=result)]

    return computations


class _TopClassMetric(tfma.metrics.Metric):
    """A score of the top-class matrix; a subclass names it and gives its ``SCORE``."""
    NAME = ""
    SCORE: Callable[[ClassCounts], float]

    def __init__(self, num_classes: int = 2, name: str = ""):
        super().__init__(metric_util.merge_per_key_computations(_scalar_computations(type(self).SCORE)),
                         num_classes=num_classes, name=name or self.NAME)


class ArgmaxAccuracy(_TopClassMetric):
    """Accuracy of the top class (``sparse_categorical_accuracy``)."""
    NAME, SCORE = "sparse_categorical_accuracy", staticmethod(_accuracy)


class MeanClassRecall(_TopClassMetric):
    """Balanced accuracy: the mean recall of the classes present."""
    NAME, SCORE = "balanced_accuracy", staticmethod(_balanced_accuracy)


class MacroF1(_TopClassMetric):
    """The mean F1 of the classes present."""
    NAME, SCORE = "macro_f1", staticmethod(_macro_f1)


class PerClassPrecisionRecall(tfma.metrics.Metric):
    """Precision and recall of every class at 0.5 (the module's docstring: why it equals TFMA's binarized ones)."""

    def __init__(self, num_classes: int = 2, name: str = "per_class_precision_recall"):
        super().__init__(metric_util.merge_per_key_computations(_per_class_computations),
                         num_classes=num_classes, name=name)


def _per_class_computations(num_classes: int, name: str, eval_config=None, model_name: str = "",
                            output_name: str = "", example_weighted: bool = False):
    matrices, matrices_key = _matrices(eval_config, model_name, output_name, example_weighted)

    def key(metric: str, class_id: int):
        return metric_types.MetricKey(name=metric, model_name=model_name, output_name=output_name,
                                      sub_key=metric_types.SubKey(class_id=class_id), example_weighted=example_weighted)

    keys = {k: (key("precision", k), key("recall", k)) for k in range(int(num_classes))}

    def result(metrics):
        hits, predicted, actual = class_counts(metrics[matrices_key][_ABOVE_HALF])
        out = {}
        for k, (precision, recall) in keys.items():
            out[precision] = hits[k] / predicted[k] if predicted[k] else math.nan
            out[recall] = hits[k] / actual[k] if actual[k] else math.nan
        return out

    return [*matrices, metric_types.DerivedMetricComputation(
        keys=[k for pair in keys.values() for k in pair], result=result)]

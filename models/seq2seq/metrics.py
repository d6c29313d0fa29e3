"""The Evaluator's next-token metrics, TFMA-native (``MetricConfig(class_name="NextToken...",
module="models.seq2seq.metrics")``): top-1, top-k, cross-entropy and perplexity, and top-1 and top-k on
the examples whose next word is known (not the OOV id, the vocabulary's last: ``generate`` never emits
it, so a hit on OOV is no help to a user of ``generate``).

Perplexity is the exp of the mean cross-entropy over the slice, not a mean of per-batch
exps, which would overweight bad batches.
"""
import dataclasses

from stackenv.tfma import tfma

import apache_beam as beam
import numpy as np
from tensorflow_model_analysis.metrics import metric_types, metric_util

from models.seq2seq import features

# The Evaluator computes top-1, top-k, cross-entropy and perplexity from ONE pass over the
# examples: a single TFMA combiner sums the four per-example scores, and each metric is a
# derived computation reading those sums. TFMA de-duplicates computations with the same
# keys and combiner name (``metrics_plots_and_validations_evaluator._filter_and_separate_
# computations``, TFMA 0.47), so four metrics in the config still mean one combiner.
# Why: TFMA's Keras-metric wrapper converts every example's label and prediction once per
# metric and slice and runs each metric's TF update per batch; with a vocabulary-wide
# prediction that was half of the seq2seq Evaluator's per-example time
# (docs/history/benchmarks-log.md, "The Evaluator").
#
# Same values as the Keras metrics they replace (tf_keras 2.16), per example:
# - top-1: ``argmax(prediction) == label`` (first index on ties, as tf.argmax);
# - top-k: ``tf.math.in_top_k``: the label is in the top k when fewer than k classes score
#   strictly higher (ties at the boundary count as in);
# - cross-entropy from probabilities: tf_keras clips to [1e-7, 1 - 1e-7], takes the log
#   and applies a softmax cross-entropy, i.e. ``log(sum(clipped)) - log(clipped[label])``.

_EPSILON = 1e-7   # tf_keras.backend.epsilon()
_TOTALS = "_next_token_totals"


@dataclasses.dataclass
class _Totals:
    weight: float = 0.0
    top1: float = 0.0
    topk: float = 0.0
    cross_entropy: float = 0.0
    known_weight: float = 0.0
    known_top1: float = 0.0
    known_topk: float = 0.0


def example_scores(label: int, probabilities: np.ndarray, k: int) -> tuple[float, float, float]:
    """(top-1 hit, top-k hit, cross-entropy) of one example, as the Keras metrics score it."""
    p = np.asarray(probabilities, np.float64).reshape(-1)
    top1 = float(int(np.argmax(p)) == label)
    topk = float(np.count_nonzero(p > p[label]) < k)
    clipped = np.clip(p, _EPSILON, 1 - _EPSILON)
    return top1, topk, float(np.log(clipped.sum()) - np.log(clipped[label]))


class _NextTokenCombiner(beam.CombineFn):
    def __init__(self, key: metric_types.MetricKey, eval_config, k: int, example_weighted: bool):
        self._key, self._eval_config, self._k, self._example_weighted = key, eval_config, k, example_weighted

    def create_accumulator(self) -> _Totals:
        return _Totals()

    def add_input(self, totals: _Totals, element) -> _Totals:
        for label, prediction, weight in metric_util.to_label_prediction_example_weight(
                element, eval_config=self._eval_config, model_name=self._key.model_name,
                output_name=self._key.output_name, example_weighted=self._example_weighted,
                flatten=False, squeeze=False):
            label = int(np.asarray(label).reshape(-1)[0])
            top1, topk, cross_entropy = example_scores(label, prediction, self._k)
            weight = float(np.asarray(weight).reshape(-1)[0])
            totals.weight += weight
            totals.top1 += weight * top1
            totals.topk += weight * topk
            totals.cross_entropy += weight * cross_entropy
            if label < np.size(prediction) - features.NUM_OOV_BUCKETS:  # a known next word
                totals.known_weight += weight
                totals.known_top1 += weight * top1
                totals.known_topk += weight * topk
        return totals

    def merge_accumulators(self, accumulators) -> _Totals:
        merged = _Totals()
        for totals in accumulators:
            merged.weight += totals.weight
            merged.top1 += totals.top1
            merged.topk += totals.topk
            merged.cross_entropy += totals.cross_entropy
            merged.known_weight += totals.known_weight
            merged.known_top1 += totals.known_top1
            merged.known_topk += totals.known_topk
        return merged

    def extract_output(self, totals: _Totals) -> dict:
        return {self._key: totals}


def _scores(value_name: str, k: int, name: str, eval_config=None, model_name: str = "", output_name: str = "",
            example_weighted: bool = False):
    def key(metric: str) -> metric_types.MetricKey:
        return metric_types.MetricKey(name=metric, model_name=model_name, output_name=output_name,
                                      example_weighted=example_weighted)

    totals_key = key(f"{_TOTALS}_top{k}")
    own = key(name)

    def result(metrics) -> dict:
        totals = metrics[totals_key]
        if value_name.startswith("known_"):
            known = {"known_top1": totals.known_top1, "known_topk": totals.known_topk}[value_name]
            return {own: known / totals.known_weight if totals.known_weight else float("nan")}
        if not totals.weight:
            return {own: float("nan")}
        mean = {"top1": totals.top1, "topk": totals.topk, "cross_entropy": totals.cross_entropy,
                "perplexity": totals.cross_entropy}[value_name] / totals.weight
        return {own: float(np.exp(mean)) if value_name == "perplexity" else mean}

    return [metric_types.MetricComputation(keys=[totals_key], preprocessors=None,
                                           combiner=_NextTokenCombiner(totals_key, eval_config, k, example_weighted)),
            metric_types.DerivedMetricComputation(keys=[own], result=result)]


def _computations_of(value_name: str):
    def computations(name: str, k: int, eval_config=None, model_name: str = "", output_name: str = "",
                     example_weighted: bool = False):
        return _scores(value_name, k, name, eval_config, model_name, output_name, example_weighted)

    return computations


class _NextTokenMetric(tfma.metrics.Metric):
    NAME = VALUE = ""

    def __init__(self, name: str = "", k: int = 5):
        super().__init__(metric_util.merge_per_key_computations(_computations_of(self.VALUE)),
                         name=name or self.NAME, k=k)


class NextTokenAccuracy(_NextTokenMetric):
    """Top-1 accuracy (``sparse_categorical_accuracy``, the Keras metric's name and value)."""
    NAME, VALUE = "sparse_categorical_accuracy", "top1"


class NextTokenTopKAccuracy(_NextTokenMetric):
    """Top-k accuracy (``sparse_top_k_categorical_accuracy``)."""
    NAME, VALUE = "sparse_top_k_categorical_accuracy", "topk"


class NextTokenCrossEntropy(_NextTokenMetric):
    """Mean cross-entropy of the next token (``sparse_categorical_crossentropy``)."""
    NAME, VALUE = "sparse_categorical_crossentropy", "cross_entropy"


class NextTokenPerplexity(_NextTokenMetric):
    """``exp`` of the mean cross-entropy (``perplexity``)."""
    NAME, VALUE = "perplexity", "perplexity"


class NextTokenKnownAccuracy(_NextTokenMetric):
    """Top-1 accuracy on the examples whose next word is known (not OOV)."""
    NAME, VALUE = "known_word_accuracy", "known_top1"


class NextTokenKnownTopKAccuracy(_NextTokenMetric):
    """Top-k accuracy on the examples whose next word is known (not OOV)."""
    NAME, VALUE = "known_word_top_k_accuracy", "known_topk"

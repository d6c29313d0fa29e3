"""TFMA EvalConfig for seq2seq: what 'good enough to serve' means for next-token prediction.

TFMA scores ``serving_default``'s next-token distribution against ``next_token_xf`` (the
first target token, read through ``transform_features``). The gate is top-5 accuracy: with
thousands of tokens and many plausible continuations, top-1 is too harsh and too noisy to
gate on, while top-5 matches how suggestions are shown and is what the n-gram baselines
report.
"""
from stackenv.tfma import tfma

from google.protobuf import wrappers_pb2

from models.common.evaluation import overall_gate
from models.seq2seq import features

GATE_METRIC = "sparse_top_k_categorical_accuracy"   # TFMA's name for the top-5 accuracy
ACCURACY = "sparse_categorical_accuracy"
CROSS_ENTROPY = "sparse_categorical_crossentropy"
PERPLEXITY = "perplexity"
#: Top-1 and top-5 on known next words (models/seq2seq/metrics.py), printed beside the overall figures.
KNOWN_TOP1, KNOWN_TOP5 = "known_word_accuracy", "known_word_top_k_accuracy"
TOP_K = 5
METRICS_MODULE = "models.seq2seq.metrics"


def eval_config(min_top5: float, max_regression: float) -> tfma.EvalConfig:
    """Count, top-1, top-5, cross-entropy, perplexity, and top-1/top-5 on known next words, overall / by
    document / by position.

    Blessing needs overall top-5 accuracy >= ``min_top5`` and at most ``max_regression``
    (absolute) below the served model. The model's compiled (per-token, logits)
    Keras metrics are left out: they do not apply to the exported probabilities.
    """
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(
            # A plain SavedModel for TFMA: it calls the signatures and never revives the
            # subclassed Keras model (slow, and its compiled metrics are per-token logits).
            model_type=tfma.TF_GENERIC,
            signature_name="serving_default",
            preprocessing_function_names=["transform_features"],
            label_key=features.NEXT_TOKEN_XF,
            prediction_key="probabilities",
        )],
        slicing_specs=[tfma.SlicingSpec()] + [
            tfma.SlicingSpec(feature_keys=[key]) for key in features.SLICING_FEATURES],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="ExampleCount"),
            # One pass computes all four (models/seq2seq/metrics.py), under the Keras metrics' names.
            tfma.MetricConfig(class_name="NextTokenAccuracy", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="NextTokenTopKAccuracy", module=METRICS_MODULE, config=f'{{"k": {TOP_K}}}',
                              per_slice_thresholds=overall_gate(min_top5, max_regression)),
            tfma.MetricConfig(class_name="NextTokenCrossEntropy", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="NextTokenPerplexity", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="NextTokenKnownAccuracy", module=METRICS_MODULE),
            tfma.MetricConfig(class_name="NextTokenKnownTopKAccuracy", module=METRICS_MODULE,
                              config=f'{{"k": {TOP_K}}}'),
        ])],
        options=tfma.Options(include_default_metrics=wrappers_pb2.BoolValue(value=False)),
    )

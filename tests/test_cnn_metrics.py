"""The CNN's per-class precision/recall equals TFMA's binarized Precision / Recall, key for key.

Both run in TFMA itself (``tfma.analyze_raw_data``: real Beam, real combiners) on the same
predictions, sliced overall and by a feature; the expected values are TFMA's own metrics.
"""
from __future__ import annotations

import json
import math

from stackenv.tfma import tfma

import numpy as np
import pandas as pd

from artifacts.tfma_results import scalar

CLASSES = 4


def _data() -> pd.DataFrame:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(400):
        label = int(rng.integers(0, CLASSES - 1))  # class 3 never true: its recall is NaN
        sharp = rng.random() < 0.6                   # confident (top > 0.5) or not (no class > 0.5)
        logits = rng.normal(0, 3 if sharp else 0.2, CLASSES) + (2.5 if sharp else 0) * np.eye(CLASSES)[label]
        probabilities = np.exp(logits) / np.exp(logits).sum()
        rows.append({"label": label, "prediction": probabilities.tolist(), "part": "a" if i % 3 else "b"})
    return pd.DataFrame(rows)


def _values(metrics_specs: list, data: pd.DataFrame) -> dict:
    config = tfma.EvalConfig(model_specs=[tfma.ModelSpec(label_key="label", prediction_key="prediction")],
                             slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["part"])],
                             metrics_specs=metrics_specs)
    result = tfma.analyze_raw_data(data, config)
    values = {}
    for slice_key, by_output in result.slicing_metrics:
        for sub_key, by_name in by_output[""].items():
            for name in ("precision", "recall"):
                if sub_key.startswith("classId:") and name in by_name:
                    values[(slice_key, sub_key, name)] = scalar(by_name[name])  # "NaN" -> nan
    return values


def test_per_class_precision_recall_is_tfma_binarized_precision_recall():
    data = _data()
    binarized = _values([tfma.MetricsSpec(
        binarize=tfma.BinarizationOptions(class_ids={"values": list(range(CLASSES))}),
        metrics=[tfma.MetricConfig(class_name="Precision"), tfma.MetricConfig(class_name="Recall")])], data)
    one_matrix = _values([tfma.MetricsSpec(metrics=[tfma.MetricConfig(
        class_name="PerClassPrecisionRecall", module="models.cnn.metrics",
        config=json.dumps({"num_classes": CLASSES}))])], data)
    assert len(binarized) == 3 * CLASSES * 2  # 3 slices x classes x (precision, recall)
    assert set(one_matrix) == set(binarized)
    for key, expected in binarized.items():
        got = one_matrix[key]
        assert (math.isnan(got) and math.isnan(expected)) or math.isclose(got, expected, abs_tol=1e-9), (key, got,
                                                                                                           expected)
    assert any(math.isnan(v) for v in binarized.values())  # the undefined case is covered


def test_cnn_metrics_equal_scikit_learn_on_the_top_class_per_slice():
    # The TFMA-native accuracy, balanced accuracy and macro F1 (models/cnn/metrics.py), run in TFMA with the
    # CNN's own metric configs (its gate's thresholds aside: no baseline here), against scikit-learn on the
    # argmax predictions of each slice. Class 3 is never a label: the macro averages skip it, as documented.
    from sklearn.metrics import accuracy_score, balanced_accuracy_score, f1_score

    from models.cnn.evaluation import eval_config

    data = _data()
    specs = eval_config(CLASSES, 0.0, 0.01).metrics_specs
    for metric in specs[0].metrics:
        del metric.per_slice_thresholds[:]
    config = tfma.EvalConfig(model_specs=[tfma.ModelSpec(label_key="label", prediction_key="prediction")],
                             slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["part"])],
                             metrics_specs=specs)
    got = {slice_key: by_output[""][""] for slice_key, by_output in tfma.analyze_raw_data(data, config).slicing_metrics}
    assert set(got) == {(), (("part", "a"),), (("part", "b"),)}
    for slice_key, values in got.items():
        rows = data if not slice_key else data[data["part"] == slice_key[0][1]]
        labels, predicted = rows["label"].to_numpy(), np.array([np.argmax(p) for p in rows["prediction"]])
        present = sorted(set(labels))
        expected = {"sparse_categorical_accuracy": accuracy_score(labels, predicted),
                    "balanced_accuracy": balanced_accuracy_score(labels, predicted),
                    "macro_f1": f1_score(labels, predicted, labels=present, average="macro", zero_division=0)}
        for name, value in expected.items():
            assert math.isclose(scalar(values[name]), value, abs_tol=1e-9), (slice_key, name, values[name], value)


def test_the_cnn_evaluation_walks_the_examples_twice_per_slice():
    # TFMA runs every combiner over every example of every slice in Python. The CNN's metrics and its confusion
    # matrix plot share ONE matrices combiner (the example count is the other); Keras metrics or a second set of
    # matrices would each add a walk (docs/history/benchmarks-log.md, "Against TFX's own example").
    from tensorflow_model_analysis.evaluators.metrics_plots_and_validations_evaluator import (
        _filter_and_separate_computations,
    )
    from tensorflow_model_analysis.metrics import metric_specs

    from models.cnn.evaluation import eval_config

    config = eval_config(CLASSES, 0.5, 0.01)
    walks = _filter_and_separate_computations(metric_specs.to_computations(config.metrics_specs, config))[0]
    assert len(walks) == 2, [type(c.combiner).__name__ for c in walks]

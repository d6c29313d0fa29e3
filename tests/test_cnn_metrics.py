"""The CNN's per-class precision/recall equals TFMA's binarized Precision / Recall, key for key.

Both run in TFMA itself (``tfma.analyze_raw_data``: real Beam, real combiners) on the same
predictions, sliced overall and by a feature; the expected values are TFMA's own metrics.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import tensorflow_model_analysis as tfma

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

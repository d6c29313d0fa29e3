"""An evaluation's TFMA results as pandas tables: per slice, candidate vs baseline, per class.

TFMA's notebook widgets do not render in many Jupyter setups (tensorflow/model-analysis
#112, #116), so the notebook and the HTML report share these plain frames. Values are read
with ``artifacts/tfma_results.py``, the reader the run summary and the Pusher use too.
"""
import logging
import math
import re
from collections.abc import Sequence
from typing import Any

from stackenv.tfma import tfma

import numpy as np
import pandas as pd
import tensorflow as tf
from tensorflow_model_analysis.view import view_types

from artifacts import tfma_results
from artifacts.tfma_results import COUNT_METRIC
from pipeline.report.evaluations import Evaluation
from pipeline.report.inputs import dataset_manifest

log = logging.getLogger(__name__)

CONFUSION_MATRIX_PLOT = "multiClassConfusionMatrixAtThresholds"
CLASS_SUB_KEY = re.compile(r"^classId:(\d+)$")


def load_result(evaluation: Evaluation, model: str = "candidate") -> tfma.EvalResult:
    """``tfma.load_eval_result`` for the candidate or the baseline of an evaluation."""
    return tfma_results.load_result(evaluation.uri, model)


def load_time_series(evaluations: Sequence[Evaluation]) -> view_types.EvalResults:
    """Candidate results of several evaluations, for ``tfma.view.render_time_series``."""
    return tfma.make_eval_results([load_result(e) for e in evaluations], tfma.constants.MODEL_CENTRIC_MODE)


def key_metric(evaluation: Evaluation, metric_names: Sequence[str]) -> str:
    """The family's key metric, or (unknown family, renamed metric) the first accuracy-like one."""
    preferred = evaluation.report_family.key_metric
    if preferred in metric_names:
        return preferred
    # Plain accuracy first: balanced accuracy is its imbalance-aware companion, not the key.
    candidates = ([m for m in metric_names if "accuracy" in m and "balanced" not in m]
                  or [m for m in metric_names if "accuracy" in m] or [m for m in metric_names if m != COUNT_METRIC])
    if not candidates:
        raise ValueError(f"Evaluation {evaluation.uri} has no metric to rank slices by.")
    return candidates[0]


def slice_metrics_frame(evaluation: Evaluation, model: str = "candidate") -> pd.DataFrame:
    """Every scalar metric per slice, worst slice (by the key metric) first.

    Columns: ``slice``, ``feature`` ("" for overall), ``example_count``, the key metric,
    then the other metrics. ``df.attrs["key_metric"]`` names the key metric.
    """
    rows = []
    for slice_key, by_output in load_result(evaluation, model).slicing_metrics:
        row: dict[str, Any] = {"slice": tfma_results.slice_name(slice_key),
                               "feature": ", ".join(k for k, _ in slice_key)}
        row.update(tfma_results.slice_scalars(by_output))
        rows.append(row)
    frame = pd.DataFrame(rows)
    metric_names = [c for c in frame.columns if c not in ("slice", "feature")]
    key = key_metric(evaluation, metric_names)
    others = sorted(m for m in metric_names if m not in (key, COUNT_METRIC))
    columns = ["slice", "feature"] + [c for c in (COUNT_METRIC, key) if c in frame.columns] + others
    ascending = evaluation.report_family.higher_is_better
    frame = (frame[columns].sort_values([key, "slice"], ascending=[ascending, True], na_position="last")
             .reset_index(drop=True))
    frame.attrs["key_metric"] = key
    frame.attrs["higher_is_better"] = ascending
    return frame


def worst_slices(frame: pd.DataFrame) -> pd.Series:
    """Boolean mask of the worst slice(s) by the key metric, overall excluded."""
    key = frame.attrs["key_metric"]
    sliced = frame[frame["slice"] != "overall"][key].dropna()
    if sliced.empty:
        return pd.Series(False, index=frame.index)
    worst = sliced.min() if frame.attrs.get("higher_is_better", True) else sliced.max()
    return (frame["slice"] != "overall") & (frame[key] == worst)


def style_slice_metrics(frame: pd.DataFrame):
    """pandas Styler of ``slice_metrics_frame`` with the worst slice(s) highlighted."""
    mask = worst_slices(frame)

    def highlight(row: pd.Series) -> list[str]:
        return ["background-color: #fde0dd; font-weight: bold" if mask[row.name] else ""] * len(row)

    return frame.style.apply(highlight, axis=1).format(precision=4).format(
        "{:.0f}", subset=[c for c in (COUNT_METRIC,) if c in frame.columns])


def comparison_frame(evaluation: Evaluation, slice_: str = "overall") -> pd.DataFrame:
    """Candidate vs baseline on one slice: ``metric, candidate, baseline, diff``.

    Empty (same columns) if the evaluation has no baseline, e.g. the first push.
    ``diff`` is TFMA's own ``<metric>_diff`` (what the change threshold checked).
    """
    columns = ["metric", "candidate", "baseline", "diff"]
    if not evaluation.has_baseline:
        return pd.DataFrame(columns=columns)
    candidate_slice = tfma_results.find_slice(load_result(evaluation, "candidate"), slice_)
    candidate = tfma_results.slice_scalars(candidate_slice)
    baseline = tfma_results.slice_scalars(tfma_results.find_slice(load_result(evaluation, "baseline"), slice_))
    diffs = tfma_results.slice_diffs(candidate_slice)
    rows = [{"metric": m, "candidate": candidate[m], "baseline": baseline.get(m, math.nan),
             "diff": diffs.get(m, candidate[m] - baseline.get(m, math.nan))} for m in candidate]
    return pd.DataFrame(rows, columns=columns)


def class_names(evaluation: Evaluation) -> list[str] | None:
    """Class names in id order: the Transform vocabulary, else the data manifest."""
    vocabulary = evaluation.report_family.class_vocabulary
    if vocabulary and evaluation.transform_graph_uri:
        import tensorflow_transform as tft

        try:
            names = tft.TFTransformOutput(evaluation.transform_graph_uri).vocabulary_by_name(vocabulary)
            return [n.decode() if isinstance(n, bytes) else str(n) for n in names]
        except (ValueError, OSError, tf.errors.NotFoundError) as error:
            log.warning("No vocabulary %r in %s (%s); trying the data manifest.",
                        vocabulary, evaluation.transform_graph_uri, error)
    manifest = dataset_manifest(evaluation)
    return list(manifest.classes) if manifest is not None and manifest.classes else None


def per_class_frame(evaluation: Evaluation, slice_: str = "overall") -> pd.DataFrame:
    """Precision and recall per class (sub keys ``classId:N``) with class names."""
    by_output = tfma_results.find_slice(load_result(evaluation), slice_)
    names = class_names(evaluation) or []
    rows = []
    for by_sub_key in by_output.values():
        for sub_key in by_sub_key:
            match = CLASS_SUB_KEY.match(sub_key)
            if match:
                class_id = int(match.group(1))
                name = names[class_id] if class_id < len(names) else str(class_id)
                rows.append({"class_id": class_id, "class": name,
                             **tfma_results.slice_scalars(by_output, sub_key)})
    frame = pd.DataFrame(rows)
    return frame.sort_values("class_id").reset_index(drop=True) if rows else frame


def confusion_matrix_frame(evaluation: Evaluation, slice_: str = "overall") -> pd.DataFrame:
    """Counts from TFMA's MultiClassConfusionMatrixPlot: rows actual, columns predicted."""
    plots = load_result(evaluation).plots or []
    matrix = next((by_output for key, by_output in plots if tfma_results.slice_name(key) == slice_), None)
    entries = None
    for by_sub_key in (matrix or {}).values():
        plot = by_sub_key.get("", {}).get(CONFUSION_MATRIX_PLOT)
        if plot and plot.get("matrices"):
            entries = plot["matrices"][0].get("entries", [])
    if entries is None:
        raise ValueError(f"Evaluation {evaluation.uri} has no {CONFUSION_MATRIX_PLOT} for slice {slice_!r}; "
                         "add MultiClassConfusionMatrixPlot to the family's metrics.")
    names = class_names(evaluation) or []
    ids = [(e.get("actualClassId", 0), e.get("predictedClassId", 0)) for e in entries]
    size = max([len(names)] + [max(a, p) + 1 for a, p in ids])
    counts = np.zeros((size, size))
    for (actual, predicted), entry in zip(ids, entries):
        if actual >= 0 and predicted >= 0:   # -1: no prediction above the threshold
            counts[actual, predicted] += entry.get("numWeightedExamples", 0.0)
    labels = [names[i] if i < len(names) else str(i) for i in range(size)]
    return pd.DataFrame(counts, index=pd.Index(labels, name="actual"),
                        columns=pd.Index(labels, name="predicted"))

"""The gate of an evaluation in plain words: every threshold per slice, passed or not.

Wording of failures is the run summary's (``artifacts/tfma_results.py`` holds both), so the
terminal, the notebook and the HTML report say the same thing.
"""
import math
from typing import Any

from stackenv.tfma import tfma

import pandas as pd

from artifacts import tfma_results
from pipeline.report.evaluations import Evaluation
from pipeline.report.tables import load_result


def validation_frame(evaluation: Evaluation) -> pd.DataFrame:
    """Every threshold of the gate, per slice it applies to: ``check, value, passed``.

    ``check`` is plain words ("sparse_categorical_accuracy (overall) >= 0.9");
    ``value`` is the candidate's metric (its diff for change thresholds).
    """
    candidate = evaluation.model_names["candidate"] or ""
    result = load_result(evaluation)
    failed = tfma_results.failed_checks(evaluation.uri)
    rows = []
    for metric_key, specs in tfma_results.thresholds(evaluation.uri).items():
        if metric_key.model_name != candidate or (metric_key.is_diff and not evaluation.has_baseline):
            continue
        for slicing_spec, threshold in specs:
            applies = tfma.slicer.SingleSliceSpec(spec=slicing_spec or tfma.SlicingSpec())
            for slice_key, by_output in result.slicing_metrics:
                if not applies.is_slice_applicable(slice_key):
                    continue
                name = tfma_results.slice_name(slice_key)
                values = (tfma_results.slice_diffs(by_output) if metric_key.is_diff
                          else tfma_results.slice_scalars(by_output))
                column = tfma_results.metric_column(metric_key.output_name, metric_key.name)
                passed = None if failed is None else (metric_key.name, metric_key.is_diff, name) not in failed
                rows.append({"check": f"{metric_key.name} ({name}) {tfma_results.threshold_words(threshold)}",
                             "value": values.get(column, math.nan), "passed": passed})
    return pd.DataFrame(rows, columns=["check", "value", "passed"])


def validation_summary(evaluation: Evaluation) -> dict[str, Any]:
    """Blessed or not, and the failed thresholds in plain words (summary's wording)."""
    failures = tfma_results.validation_failures(evaluation.uri) if evaluation.blessed is False else []
    if evaluation.blessed is True:
        verdict = "Blessed: yes, every threshold passed."
    elif evaluation.blessed is False:
        verdict = "NOT blessed: " + ("; ".join(failures) if failures else "see the validation table.")
    else:
        verdict = "Blessing unknown: the Evaluator wrote no blessing."
    return {"blessed": evaluation.blessed, "failures": failures, "text": verdict}

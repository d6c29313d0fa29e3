"""Read a TFMA evaluation directory: model names, metrics per slice, the validation result.

The one reader of the Evaluator's output format, shared by the run summary, the report
and the Pusher. It lives in ``data/`` (the project's storage formats) so that
``components/`` can use it without importing ``pipeline/``. It knows nothing about
MLMD or model families: callers pass the evaluation URI and the metric names.
"""
import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from stackenv.tfma import tfma

from tensorflow_model_analysis.writers import eval_config_writer

COUNT_METRIC = "example_count"
DIFF_SUFFIX = "_diff"

# TFMA's slicing_metrics per slice: {output_name: {sub_key: {metric: value dict}}}.
ByOutput = dict[str, dict[str, dict[str, Any]]]


@dataclasses.dataclass
class SliceMetric:
    slice_name: str
    value: float
    count: float | None


def slice_name(slice_key: tuple) -> str:
    """``overall`` or ``feature=value[, ...]``: how every slice is named to a reader."""
    return "overall" if not slice_key else ", ".join(f"{k}={v}" for k, v in slice_key)


def evaluated_models(evaluation_uri: str) -> dict[str, str | None]:
    """TFMA model names of the candidate and (if any) the baseline in an evaluation.

    Without a baseline the single model is unnamed; with one, TFX names them.
    """
    eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
    names: dict[str, str | None] = {"candidate": None, "baseline": None}
    for spec in eval_config.model_specs:
        names["baseline" if spec.is_baseline else "candidate"] = spec.name or None
    return names


def load_result(evaluation_uri: str, model: str = "candidate") -> tfma.EvalResult:
    """``tfma.load_eval_result`` for the candidate or the baseline of an evaluation."""
    names = evaluated_models(evaluation_uri)
    if model == "baseline" and names["baseline"] is None:
        raise ValueError(f"Evaluation {evaluation_uri} has no baseline model.")
    return tfma.load_eval_result(evaluation_uri, model_name=names[model])


def overall_metrics(evaluation_uri: str) -> dict[str, Any]:
    """The candidate's overall metrics that TFMA stored as a double (NaN stays TFMA's "NaN")."""
    for slice_key, by_output in load_result(evaluation_uri).slicing_metrics:
        if not slice_key:
            values = by_output.get("", {}).get("", {})
            return {k: v["doubleValue"] for k, v in values.items() if isinstance(v, dict) and "doubleValue" in v}
    return {}


def slice_metrics(evaluation_uri: str, metric_name: str, model: str = "candidate") -> list[SliceMetric]:
    """``metric_name`` (with example counts) per slice for the candidate or the baseline model."""
    if model == "baseline" and evaluated_models(evaluation_uri)["baseline"] is None:
        return []
    metrics = []
    for slice_key, by_output in load_result(evaluation_uri, model).slicing_metrics:
        values = by_output.get("", {}).get("", {})
        if metric_name not in values:
            continue
        count = values.get(COUNT_METRIC, {}).get("doubleValue")
        metrics.append(SliceMetric(slice_name(slice_key), values[metric_name]["doubleValue"], count))
    return metrics


def scalar(value: Any) -> float | None:
    """A TFMA metric value as a float (NaN comes as the string "NaN"); None if not scalar."""
    if not isinstance(value, dict):
        return None
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boundedValue" in value:
        return float(value["boundedValue"].get("value", math.nan))
    return None


def metric_column(output_name: str, metric: str) -> str:
    return f"{output_name}/{metric}" if output_name else metric


def slice_scalars(by_output: ByOutput, sub_key: str = "") -> dict[str, float]:
    """Scalar metrics of one slice and sub key, diffs against the baseline left out."""
    values = {}
    for output_name, by_sub_key in sorted(by_output.items()):
        for metric, value in sorted(by_sub_key.get(sub_key, {}).items()):
            number = scalar(value)
            if number is not None and not metric.endswith(DIFF_SUFFIX):
                values[metric_column(output_name, metric)] = number
    return values


def slice_diffs(by_output: ByOutput) -> dict[str, float]:
    """TFMA's ``<metric>_diff`` values of one slice (candidate minus baseline), by metric."""
    diffs = {}
    for output_name, by_sub_key in by_output.items():
        for metric, value in by_sub_key.get("", {}).items():
            number = scalar(value)
            if metric.endswith(DIFF_SUFFIX) and number is not None:
                diffs[metric_column(output_name, metric[:-len(DIFF_SUFFIX)])] = number
    return diffs


def find_slice(result: tfma.EvalResult, name: str) -> ByOutput:
    for slice_key, by_output in result.slicing_metrics:
        if slice_name(slice_key) == name:
            return by_output
    raise KeyError(f"No slice {name!r} in the evaluation; it has "
                   f"{sorted(slice_name(k) for k, _ in result.slicing_metrics)}.")


# ----------------------------------------------------------------------------- validation


def _validation_slice_key(slice_key) -> tuple[tuple[str, str], ...]:
    """A validation result's slice key (proto) as the (column, value) pairs ``slice_name`` takes."""
    pairs = []
    for key in slice_key.single_slice_keys:
        value = getattr(key, key.WhichOneof("kind"))
        pairs.append((key.column, value.decode() if isinstance(value, bytes) else str(value)))
    return tuple(pairs)


def validation_failures(evaluation_uri: str) -> list[str]:
    """Plain-words reasons from TFMA's validation result (empty when it passed)."""
    result = tfma.load_validation_result(evaluation_uri)
    reasons = []
    for per_slice in result.metric_validations_per_slice:
        where = slice_name(_validation_slice_key(per_slice.slice_key))
        for failure in per_slice.failures:
            value = failure.metric_value.double_value.value
            reasons.append(f"{failure.metric_key.name} ({where}) = "
                           f"{apart(value, _failed_bound(failure.metric_threshold, value))} fails "
                           f"{_failed_threshold_text(failure.metric_threshold)}")
    if not reasons and not result.validation_ok:
        reasons.append(str(result.validation_details or "validation failed").strip())
    return reasons


def failed_checks(evaluation_uri: str) -> set[tuple[str, bool, str]] | None:
    """(metric, is_diff, slice name) of every failed threshold; None if TFMA wrote no validation."""
    import tensorflow as tf

    try:
        result = tfma.load_validation_result(evaluation_uri)
    except (AssertionError, OSError, tf.errors.NotFoundError):   # TFMA asserts the file exists
        return None
    failed = set()
    for per_slice in result.metric_validations_per_slice:
        name = slice_name(_validation_slice_key(per_slice.slice_key))
        for failure in per_slice.failures:
            failed.add((failure.metric_key.name, failure.metric_key.is_diff, name))
    return failed


def apart(value: float, bound: float, digits: int = 4, most: int = 8) -> str:
    """``value`` with ``digits`` decimals, or as many more as it takes not to read as ``bound``.

    A gate can fail by less than the fourth decimal (one error in 200,000 against a reference that
    made none), and "1.0000 fails the minimum 1.0" tells the reader nothing.
    """
    for places in range(digits, most + 1):
        shown = f"{value:.{places}f}"
        if value == bound or shown != f"{bound:.{places}f}":
            return shown
    return f"{value:.{most}f}"


def _failed_bound(threshold, value: float) -> float:
    """The value bound a failure broke, or ``value`` itself for a change threshold (nothing to tell apart)."""
    if threshold.HasField("value_threshold"):
        bound = threshold.value_threshold
        return bound.lower_bound.value if bound.HasField("lower_bound") else bound.upper_bound.value
    return value


def _failed_threshold_text(threshold) -> str:
    """The bound a failure broke, as the run summary words it ("the minimum 0.99")."""
    if threshold.HasField("value_threshold"):
        bound = threshold.value_threshold
        if bound.HasField("lower_bound"):
            return f"the minimum {bound.lower_bound.value:.6g}"
        return f"the maximum {bound.upper_bound.value:.6g}"
    change = threshold.change_threshold
    return f"the change limit vs. the served model ({change.absolute.value:+})"


def threshold_words(threshold) -> str:
    """A configured threshold as a check reads (">= 0.9", "at most 0.01 below the baseline")."""
    if isinstance(threshold, tfma.GenericValueThreshold):
        bounds = []
        if threshold.HasField("lower_bound"):
            bounds.append(f">= {threshold.lower_bound.value:g}")
        if threshold.HasField("upper_bound"):
            bounds.append(f"<= {threshold.upper_bound.value:g}")
        return " and ".join(bounds)
    higher = threshold.direction == tfma.MetricDirection.HIGHER_IS_BETTER
    parts = []
    if threshold.HasField("absolute"):
        limit = abs(threshold.absolute.value)
        parts.append(f"at most {limit:g} {'below' if higher else 'above'} the baseline")
    if threshold.HasField("relative"):
        limit = abs(threshold.relative.value)
        parts.append(f"at most {limit:.0%} {'below' if higher else 'above'} the baseline (relative)")
    return " and ".join(parts) or "no worse than the baseline"


def thresholds(evaluation_uri: str) -> dict[Any, Sequence[tuple[Any, Any]]]:
    """Every configured threshold: {metric key: [(slicing spec, threshold), ...]}."""
    eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
    return tfma.metrics.metric_thresholds_from_metrics_specs(eval_config.metrics_specs, eval_config)

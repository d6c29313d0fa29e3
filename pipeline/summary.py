"""What a run did, in a few lines: components run/cached, metrics, blessing, push.

Everything here is read back from MLMD and the artifacts the components wrote, so the
summary is also correct for a run that was fully served from cache.
"""
import dataclasses
import json
import os
from typing import Dict, List, Optional, Tuple

import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_metadata.proto.v0 import statistics_pb2
from tensorflow_model_analysis.writers import eval_config_writer

from data.tfrecords import DatasetManifest
from pipeline import gate_summary, graph, mlmd
from pipeline.config import PipelineConfig
from pipeline.families import get_family

COUNT_METRIC = "example_count"
# Written by a Trainer run_fn into its model_run dir: reference predictors on the same eval data.
REFERENCES_FILE = "baselines.json"


class RecordCountMismatch(RuntimeError):
    pass


@dataclasses.dataclass
class SliceMetric:
    slice_name: str
    value: float
    count: Optional[float]


@dataclasses.dataclass
class RunSummary:
    pipeline_name: str
    components: List[mlmd.NodeExecution]
    split_counts: Dict[str, int]
    num_input_examples: int
    metric_name: str
    metric_label: str = "Accuracy"
    references: Dict[str, float] = dataclasses.field(default_factory=dict)
    overall: Optional[SliceMetric] = None
    baseline_overall: Optional[SliceMetric] = None
    slices: List[SliceMetric] = dataclasses.field(default_factory=list)
    blessed: Optional[bool] = None
    not_blessed_reasons: List[str] = dataclasses.field(default_factory=list)
    pushed_path: Optional[str] = None
    evaluation_uri: Optional[str] = None
    model_uri: Optional[str] = None  # the Trainer's Model (references.json, training.json)

    @property
    def worst_slice(self) -> Optional[SliceMetric]:
        return min(self.slices, key=lambda s: s.value) if self.slices else None

    @property
    def cached_count(self) -> int:
        return sum(1 for c in self.components if c.cached)


def _uri(execution: Optional[mlmd.NodeExecution], key: str) -> Optional[str]:
    if execution is None or not execution.outputs.get(key):
        return None
    return execution.outputs[key][0].uri


def split_counts_from_statistics(statistics_uri: str) -> Dict[str, int]:
    """Examples per split, as StatisticsGen counted them from ExampleGen's output."""
    counts = {}
    for entry in sorted(tf.io.gfile.listdir(statistics_uri)):
        path = os.path.join(statistics_uri, entry.rstrip("/"), "FeatureStats.pb")
        if entry.startswith("Split-") and tf.io.gfile.exists(path):
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            stats.ParseFromString(tf.io.gfile.GFile(path, "rb").read())
            counts[entry.rstrip("/")[len("Split-"):]] = sum(d.num_examples for d in stats.datasets)
    return counts


def _slice_name(slice_key: Tuple) -> str:
    return "overall" if not slice_key else ", ".join(f"{k}={v}" for k, v in slice_key)


def evaluated_models(evaluation_uri: str) -> Dict[str, Optional[str]]:
    """TFMA model names of the candidate and (if any) the baseline in an evaluation.

    Without a baseline the single model is unnamed; with one, TFX names them.
    """
    eval_config = eval_config_writer.load_eval_run(evaluation_uri)[0]
    names = {"candidate": None, "baseline": None}
    for spec in eval_config.model_specs:
        names["baseline" if spec.is_baseline else "candidate"] = spec.name or None
    return names


def slice_metrics(evaluation_uri: str, metric_name: str, model: str = "candidate") -> List[SliceMetric]:
    """``metric_name`` (with example counts) per slice for the candidate or the baseline model."""
    names = evaluated_models(evaluation_uri)
    if model == "baseline" and names["baseline"] is None:
        return []
    result = tfma.load_eval_result(evaluation_uri, model_name=names[model])
    metrics = []
    for slice_key, by_output in result.slicing_metrics:
        values = by_output.get("", {}).get("", {})
        if metric_name not in values:
            continue
        count = values.get(COUNT_METRIC, {}).get("doubleValue")
        metrics.append(SliceMetric(_slice_name(slice_key), values[metric_name]["doubleValue"], count))
    return metrics


def validation_failures(evaluation_uri: str) -> List[str]:
    """Plain-words reasons from TFMA's validation result (empty when it passed)."""
    result = tfma.load_validation_result(evaluation_uri)
    reasons = []
    for per_slice in result.metric_validations_per_slice:
        where = _slice_key_text(per_slice.slice_key)
        for failure in per_slice.failures:
            reasons.append(f"{failure.metric_key.name} ({where}) = "
                           f"{failure.metric_value.double_value.value:.4f} fails "
                           f"{_threshold_text(failure.metric_threshold)}")
    if not reasons and not result.validation_ok:
        reasons.append(str(result.validation_details or "validation failed").strip())
    return reasons


def _slice_key_text(slice_key) -> str:
    parts = []
    for key in slice_key.single_slice_keys:
        value = getattr(key, key.WhichOneof("kind"))
        parts.append(f"{key.column}={value.decode() if isinstance(value, bytes) else value}")
    return ", ".join(parts) or "overall"


def _threshold_text(threshold) -> str:
    if threshold.HasField("value_threshold"):
        bound = threshold.value_threshold
        if bound.HasField("lower_bound"):
                return f"the minimum {bound.lower_bound.value}"
        return f"the maximum {bound.upper_bound.value}"
    change = threshold.change_threshold
    return f"the change limit vs. the served model ({change.absolute.value:+})"


def _read_references(model_run_uri: Optional[str]) -> Dict[str, float]:
    path = os.path.join(model_run_uri or "", REFERENCES_FILE)
    if not model_run_uri or not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return {k: v for k, v in json.load(handle).items() if k.endswith("top5")}


def collect(config: PipelineConfig, dataset: DatasetManifest) -> RunSummary:
    family = get_family(config.model)
    store = mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
    run = mlmd.latest_run(store, config.pipeline_name)
    components = sorted(run.values(), key=lambda c: c.execution.id)
    metric_name = family.gate_metric
    summary = RunSummary(config.pipeline_name, components, {}, dataset.num_examples, metric_name,
                         family.gate_metric_label, _read_references(_uri(run.get(graph.TRAINER), "model_run")))
    summary.model_uri = _uri(run.get(graph.TRAINER), "model")
    statistics_uri = _uri(run.get(graph.STATISTICS_GEN), "statistics")
    if statistics_uri:
        summary.split_counts = split_counts_from_statistics(statistics_uri)
    evaluation_uri = _uri(run.get(graph.EVALUATOR), "evaluation")
    if evaluation_uri:
        summary.evaluation_uri = evaluation_uri
        metrics = slice_metrics(evaluation_uri, metric_name)
        summary.overall = next((m for m in metrics if m.slice_name == "overall"), None)
        summary.slices = [m for m in metrics if m.slice_name != "overall"]
        summary.baseline_overall = next(
            (m for m in slice_metrics(evaluation_uri, metric_name, "baseline") if m.slice_name == "overall"), None)
    blessing = (run.get(graph.EVALUATOR).outputs.get("blessing") or [None])[0] if run.get(graph.EVALUATOR) else None
    if blessing is not None and "blessed" in blessing.custom_properties:
        summary.blessed = bool(blessing.custom_properties["blessed"].int_value)
        if not summary.blessed and evaluation_uri:
            summary.not_blessed_reasons = validation_failures(evaluation_uri)
    pushed = run.get(graph.PUSHER)
    pushed_model = (pushed.outputs.get("pushed_model") or [None])[0] if pushed else None
    if pushed_model is not None and pushed_model.custom_properties["pushed"].int_value:
        summary.pushed_path = pushed_model.custom_properties["pushed_destination"].string_value
    return summary


def check_record_counts(summary: RunSummary) -> None:
    """What goes into ExampleGen must come out of it, split or not."""
    if summary.split_counts and sum(summary.split_counts.values()) != summary.num_input_examples:
        raise RecordCountMismatch(
            f"ExampleGen produced {sum(summary.split_counts.values())} examples "
            f"({summary.split_counts}) from {summary.num_input_examples} input examples; "
            "records were lost or duplicated. Re-run with --beam-mode in_memory and report this.")


def format_summary(summary: RunSummary, config: PipelineConfig, wall_seconds: float) -> str:
    lines = [f"── Run summary: {summary.pipeline_name} " + "─" * 30]
    ran = len(summary.components) - summary.cached_count
    lines.append(f"Components: {ran} ran, {summary.cached_count} cached")
    for c in summary.components:
        lines.append(f"  {c.node_id:<32} {c.state.lower():<9} {c.seconds:6.1f} s")
    splits = ", ".join(f"{k} {v}" for k, v in summary.split_counts.items())
    lines.append(f"Examples: {summary.num_input_examples} in -> {splits or 'n/a'}")
    if summary.overall:
        count = f" on {summary.overall.count:.0f} eval examples" if summary.overall.count else ""
        lines.append(f"{summary.metric_label} (overall): {summary.overall.value:.4f}{count}"
                     f"{gate_summary.imbalance_text(summary.evaluation_uri, 'overall')}")
    if summary.references:
        lines.append("Reference predictors on the same eval data: " + ", ".join(
            f"{name.replace('_top5', '')} top-5 {value:.4f}" for name, value in sorted(summary.references.items())))
        best = max(summary.references.values())
        if summary.overall and summary.overall.value <= best:
            lines.append("  WARNING: the model does not beat the best reference predictor; train longer.")
    lines.extend(gate_summary.lines(summary.model_uri, summary.evaluation_uri,
                                    summary.overall.value if summary.overall else None, summary.metric_label))
    if summary.baseline_overall:
        lines.append(f"Served model (baseline) on the same data: {summary.baseline_overall.value:.4f}")
    worst = summary.worst_slice
    if worst:
        count = f", n={worst.count:.0f}" if worst.count else ""
        lines.append(f"Worst slice: {worst.slice_name}: {worst.value:.4f}{count}"
                     f"{gate_summary.imbalance_text(summary.evaluation_uri, worst.slice_name)}")
    gate = (f"{summary.metric_label.lower()} >= {gate_summary.value_bound(summary.evaluation_uri, config.min_accuracy)}"
            f", at most {config.max_regression} below the served model")
    if summary.blessed is None:
        lines.append("Blessed: unknown (the Evaluator did not run)")
    elif summary.blessed:
        lines.append(f"Blessed: yes ({gate})")
    else:
        lines.append(f"Blessed: NO ({gate})")
        lines.extend(f"  - {reason}" for reason in summary.not_blessed_reasons)
    if summary.pushed_path:
        lines.append(f"Pushed: {summary.pushed_path}")
    else:
        lines.append(f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)")
    if summary.evaluation_uri:
        lines.append(f"Evaluation: {summary.evaluation_uri}")
    lines.append(f"Wall time: {wall_seconds:.1f} s")
    return "\n".join(lines)

"""What a run did, in a few lines: components run/cached, metrics, blessing, push.

Everything here is read back from MLMD and the artifacts the components wrote, so the
summary is also correct for a run that was fully served from cache.
"""
import dataclasses
import math
import os

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

import tensorflow as tf
from tensorflow_metadata.proto.v0 import statistics_pb2

from artifacts.tfma_results import COUNT_METRIC, SliceMetric, slice_metrics, validation_failures  # noqa: F401 (re-exported)
from data.images.listing import unused_line
from data.tfrecords import DatasetManifest
from models.common import intervals
from pipeline import graph
from pipeline.config import PipelineConfig
from pipeline.families import get_family
from pipeline.results import gate_summary, mlmd, score_summary, tflite_summary, tuning_summary, warm_start


class RecordCountMismatch(ProjectError):
    """ExampleGen lost or duplicated records: a pipeline bug, not the user's data."""

    exit_code = EXIT_PIPELINE_FAILED


@dataclasses.dataclass
class RunSummary:
    pipeline_name: str
    components: list[mlmd.NodeExecution]
    split_counts: dict[str, int]
    num_input_examples: int
    metric_name: str
    metric_label: str = "Accuracy"
    overall: SliceMetric | None = None
    baseline_overall: SliceMetric | None = None
    baseline_skipped: str | None = None  # why the served model was not compared (components/evaluator.py)
    slices: list[SliceMetric] = dataclasses.field(default_factory=list)
    blessed: bool | None = None
    not_blessed_reasons: list[str] = dataclasses.field(default_factory=list)
    pushed_path: str | None = None
    not_pushed_reason: str | None = None  # a blessed model the Pusher refused (components/pusher.py)
    evaluation_uri: str | None = None
    split_description: str | None = None   # how the data preparation split (data/text_split.py)
    unused_line: str | None = None  # what the listing of --data did not read (data/images/listing.py)
    corpus_line: str | None = None  # documents read and files not used (data/text_corpus.py)
    model_uri: str | None = None  # the Trainer's Model (references.json, training.json)
    warnings: list[str] = dataclasses.field(default_factory=list)  # e.g. a class with no eval example
    warm_start: str | None = None  # "Warm start: ..." when the run asked for it (pipeline/warm_start.py)
    tuning_lines: list[str] = dataclasses.field(default_factory=list)  # pipeline/results/tuning_summary.py
    score_writer: mlmd.NodeExecution | None = None  # run --score (pipeline/results/score_summary.py)
    metric_line: str | None = None  # the family's summary_metrics, overall

    @property
    def worst_slice(self) -> SliceMetric | None:
        return min(self.slices, key=lambda s: s.value) if self.slices else None

    @property
    def cached_count(self) -> int:
        return sum(1 for c in self.components if c.cached)


def _uri(execution: mlmd.NodeExecution | None, key: str) -> str | None:
    if execution is None or not execution.outputs.get(key):
        return None
    return execution.outputs[key][0].uri


def split_counts_from_statistics(statistics_uri: str) -> dict[str, int]:
    """Examples per split, as StatisticsGen counted them from ExampleGen's output."""
    counts = {}
    for entry in sorted(tf.io.gfile.listdir(statistics_uri)):
        path = os.path.join(statistics_uri, entry.rstrip("/"), "FeatureStats.pb")
        if entry.startswith("Split-") and tf.io.gfile.exists(path):
            stats = statistics_pb2.DatasetFeatureStatisticsList()
            stats.ParseFromString(tf.io.gfile.GFile(path, "rb").read())
            counts[entry.rstrip("/")[len("Split-"):]] = sum(d.num_examples for d in stats.datasets)
    return counts


def _split_warnings(statistics_uri: str, splits: list[str], slicing_features: tuple[str, ...] = (),
                    split_feature: str | None = None) -> list[str]:
    """A class or slice the eval split lacks is blessed unmeasured: say so (components/split_check.py)."""
    from components.split_check import SplitError, check_splits, read_split_facts

    try:
        return check_splits(read_split_facts(statistics_uri, splits, slicing_features), split_feature)
    except SplitError as error:  # the validator stopped that run already; keep the summary going
        return [error.paragraph]


def collect(config: PipelineConfig, dataset: DatasetManifest) -> RunSummary:
    family = get_family(config.model)
    store = mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
    run = mlmd.latest_run(store, config.pipeline_name)
    components = sorted(run.values(), key=lambda c: c.execution.id)
    metric_name = family.gate_metric
    summary = RunSummary(config.pipeline_name, components, {}, dataset.num_examples, metric_name,
                         family.gate_metric_label)
    summary.split_description = (dataset.extra.get("split") or {}).get("description")
    summary.unused_line = unused_line(dataset.extra.get("unused"))
    if dataset.extra.get("corpus"):
        from data.text_corpus import CorpusFacts

        summary.corpus_line = CorpusFacts.from_json(dataset.extra["corpus"]).describe()
    summary.model_uri = _uri(run.get(graph.TRAINER), "model")
    summary.warm_start = warm_start.summary_line(summary.model_uri, store)
    summary.tuning_lines = tuning_summary.lines(tuning_summary.read_search(run.get(graph.TUNER)),
                                                run.get(graph.HYPERPARAMETERS_IMPORTER), family.gate_metric_label)
    statistics_uri = _uri(run.get(graph.STATISTICS_GEN), "statistics")
    if statistics_uri:
        summary.split_counts = split_counts_from_statistics(statistics_uri)
        summary.warnings = _split_warnings(statistics_uri, list(summary.split_counts), family.slicing_features,
                                           family.split_feature)
    evaluation_uri = _uri(run.get(graph.EVALUATOR), "evaluation")
    if evaluation_uri:
        summary.evaluation_uri = evaluation_uri
        evaluation = run[graph.EVALUATOR].outputs["evaluation"][0]
        skipped = mlmd.custom_property(evaluation, "baseline_skipped")  # components/evaluator.py
        if skipped:
            summary.warnings.append(f"evaluated without a baseline: {skipped}")
            summary.baseline_skipped = str(skipped)
        metrics = slice_metrics(evaluation_uri, metric_name)
        summary.overall = next((m for m in metrics if m.slice_name == "overall"), None)
        summary.slices = [m for m in metrics if m.slice_name != "overall"]
        summary.baseline_overall = next(
            (m for m in slice_metrics(evaluation_uri, metric_name, "baseline") if m.slice_name == "overall"), None)
        summary.metric_line = _metric_line(evaluation_uri, family.summary_metrics)
    evaluator = run.get(graph.EVALUATOR)
    blessing = (evaluator.outputs.get("blessing") or [None])[0] if evaluator else None
    if blessing is not None and mlmd.custom_property(blessing, "blessed") is not None:
        summary.blessed = bool(mlmd.custom_property(blessing, "blessed"))
        if not summary.blessed and evaluation_uri:
            summary.not_blessed_reasons = validation_failures(evaluation_uri)
    pushed = run.get(graph.PUSHER)
    pushed_model = (pushed.outputs.get("pushed_model") or [None])[0] if pushed else None
    summary.pushed_path = mlmd.pushed_destination(pushed_model)
    if pushed_model is not None and not summary.pushed_path:
        summary.not_pushed_reason = mlmd.custom_property(pushed_model, "not_pushed_reason") or None
    summary.score_writer = run.get(graph.SCORE_WRITER)
    return summary


def check_record_counts(summary: RunSummary) -> None:
    """What goes into ExampleGen must come out of it, split or not."""
    if summary.split_counts and sum(summary.split_counts.values()) != summary.num_input_examples:
        raise RecordCountMismatch(
            f"ExampleGen produced {sum(summary.split_counts.values())} examples "
            f"({summary.split_counts}) from {summary.num_input_examples} input examples; "
            "records were lost or duplicated. Re-run with --beam-mode in_memory and report this.")


def check_scoring(summary: RunSummary) -> None:
    """A file of the --score folder that could not be read: its paragraph, and exit code 2."""
    score_summary.check_unreadable(score_summary.scores_uri(summary.score_writer))


def _metric_line(evaluation_uri: str, named: tuple[tuple[str, str], ...]) -> str | None:
    """``label value; label value`` of the overall slice, for the metrics the evaluation holds."""
    parts = []
    for label, name in named:
        overall = next((m for m in slice_metrics(evaluation_uri, name) if m.slice_name == "overall"), None)
        value = float(overall.value) if overall is not None else math.nan  # TFMA writes NaN as "NaN"
        if math.isfinite(value):
            parts.append(f"{label} {value:.4f}")
    return "; ".join(parts) or None


def format_summary(summary: RunSummary, config: PipelineConfig, wall_seconds: float) -> str:
    lines = [f"── Run summary: {summary.pipeline_name} " + "─" * 30]
    ran = len(summary.components) - summary.cached_count
    lines.append(f"Components: {ran} ran, {summary.cached_count} cached")
    for c in summary.components:
        lines.append(f"  {c.node_id:<32} {c.state.lower():<9} {c.seconds:6.1f} s")
    splits = ", ".join(f"{k} {v}" for k, v in summary.split_counts.items())
    if summary.corpus_line:
        lines.append(f"Corpus: {summary.corpus_line}")
    lines.append(f"Examples: {summary.num_input_examples} in -> {splits or 'n/a'}")
    if summary.split_description:
        lines.append(f"Split: {summary.split_description}")
    if summary.unused_line:
        lines.append(summary.unused_line)
    if summary.overall:
        count = f" on {summary.overall.count:.0f} eval examples" if summary.overall.count else ""
        lines.append(f"{summary.metric_label} (overall): {summary.overall.value:.4f}"
                     f"{intervals.text(summary.overall.value, summary.overall.count)}{count}"
                     f"{gate_summary.imbalance_text(summary.evaluation_uri, 'overall')}")
    if summary.metric_line:
        lines.append(f"  also: {summary.metric_line}")
    lines.extend(summary.tuning_lines)
    overall, overall_count = (summary.overall.value, summary.overall.count) if summary.overall else (None, None)
    lines.extend(gate_summary.lines(summary.model_uri, summary.evaluation_uri, overall, summary.metric_label,
                                    overall_count))
    if summary.warm_start:
        lines.append(summary.warm_start)
    if summary.baseline_overall:
        lines.append(f"Served model (baseline) on the same data: {summary.baseline_overall.value:.4f}"
                     f"{intervals.text(summary.baseline_overall.value, summary.baseline_overall.count)}")
    worst = summary.worst_slice
    if worst:
        count = f", n={worst.count:.0f}" if worst.count else ""
        lines.append(f"Worst slice: {worst.slice_name}: {worst.value:.4f}{count}"
                     f"{gate_summary.imbalance_text(summary.evaluation_uri, worst.slice_name)}")
    lines.extend(f"  WARNING: {warning}" for warning in summary.warnings)
    gate = (f"{summary.metric_label.lower()} >= {gate_summary.value_bound(summary.evaluation_uri, config.min_accuracy)}"
            f"{_regression_text(summary, config.max_regression)}")
    if summary.blessed is None:
        lines.append("Blessed: unknown (the Evaluator did not run)")
    elif summary.blessed:
        lines.append(f"Blessed: yes ({gate})")
    else:
        lines.append(f"Blessed: NO ({gate})")
        lines.extend(f"  - {reason}" for reason in summary.not_blessed_reasons)
        lines.extend(gate_summary.inconclusive_advice(overall, overall_count, summary.evaluation_uri))
        lines.extend(gate_summary.remedy_lines(summary.model_uri))
    if summary.pushed_path:
        lines.append(f"Pushed: {summary.pushed_path}")
        tflite_line = tflite_summary.line_for_version(summary.pushed_path)
        if tflite_line:
            lines.append(tflite_line)
    elif summary.not_pushed_reason:
        lines.append(f"Pushed: nothing, although blessed: {summary.not_pushed_reason}")
    else:
        lines.append(f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)")
    scores = score_summary.line(summary.score_writer, summary.not_blessed_reasons)
    if scores:
        lines.append(scores)
    if summary.evaluation_uri:
        lines.append(f"Evaluation: {summary.evaluation_uri}")
    lines.append(f"Wall time: {wall_seconds:.1f} s")
    return "\n".join(lines)


def _regression_text(summary: RunSummary, max_regression: float) -> str:
    """The gate's comparison with the served model, as it happened: checked against its value, not made (the
    served model could not be loaded: the run's warning says why), or no model served before."""
    if summary.baseline_overall is not None:
        return f", at most {max_regression} below the served model ({summary.baseline_overall.value:.4f})"
    if summary.baseline_skipped:
        return "; not compared with the served model, which could not be evaluated (see the warning above)"
    return "; no model was served before, so none to compare with"

"""Inspect an evaluation: metrics per slice, baseline comparison, validation, pictures, HTML.

TFMA's notebook widgets do not render in many Jupyter setups (tensorflow/model-analysis
#112, #116), so everything here is plain pandas and matplotlib; the same functions feed
``notebooks/inspect_metrics.ipynb`` and the self-contained HTML report. The evaluation
is found through MLMD and its lineage (Evaluator -> Trainer -> Transform, ExampleGen,
Pusher), like the run summary, never by guessing artifact paths.

Model families differ only in a few facts, kept in ``REPORT_FAMILIES``: the key metric,
the slicing features, the class vocabulary and the family-specific pictures.
"""
import base64
import dataclasses
import datetime
import functools
import html
import io
import json
import logging
import math
import os
import re
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import pandas as pd
import tensorflow as tf
import tensorflow_model_analysis as tfma
from matplotlib.figure import Figure
from ml_metadata.proto import metadata_store_pb2
from tensorflow_model_analysis.view import view_types
from tensorflow_model_analysis.writers import eval_config_writer

from pipeline import graph, mlmd
from pipeline.summary import COUNT_METRIC, evaluated_models, validation_failures
from stackenv.errors import MissingInput, ProjectError

log = logging.getLogger(__name__)

METADATA_FILE = "metadata.sqlite"
CONFUSION_MATRIX_PLOT = "multiClassConfusionMatrixAtThresholds"
CLASS_SUB_KEY = re.compile(r"^classId:(\d+)$")
MAX_BARS = 30   # slices in a bar chart; more (e.g. one per document) hide the worst ones
_DIFF_SUFFIX = "_diff"
_OK_STATES = ("COMPLETE", "CACHED")

Pictures = Callable[["Evaluation"], Dict[str, Figure]]


# ----------------------------------------------------------------------------- families


@dataclasses.dataclass(frozen=True)
class ReportFamily:
    """What the report needs to know about a model family (see ``REPORT_FAMILIES``)."""

    name: str
    key_metric: str                         # the gate metric; slices are ranked by it
    slicing_features: Tuple[str, ...]
    pictures: Optional[Pictures] = None     # family-specific figures, title -> Figure
    class_vocabulary: Optional[str] = None  # TFT vocabulary of class names, in id order
    higher_is_better: bool = True


# ----------------------------------------------------------------------------- finding


class ReportError(ProjectError, ValueError):
    """A problem the user can fix (no run, no such pipeline, no evaluation yet, a bad path); the message says how."""


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One Evaluator execution and what its lineage in MLMD tells about it."""

    pipeline_name: str
    family: str
    uri: str                          # TFMA output directory (the ModelEvaluation artifact)
    execution_id: int
    state: str                        # COMPLETE or CACHED
    run_name: Optional[str]           # pipeline_run context, e.g. 20261122-034924.452214
    finished: datetime.datetime
    blessed: Optional[bool]
    model_uri: Optional[str]          # the candidate: the Trainer's Model artifact
    examples_uri: Optional[str]       # ExampleGen output that was evaluated
    transform_graph_uri: Optional[str]
    data_dir: Optional[str]           # prepared data (manifest.json) that ExampleGen read
    pushed_path: Optional[str]        # where the Pusher put this model, if it was pushed

    @property
    def report_family(self) -> ReportFamily:
        return get_report_family(self.family)

    @functools.cached_property
    def model_names(self) -> Dict[str, Optional[str]]:
        """TFMA model names of candidate and baseline (the baseline is None if there was none)."""
        return evaluated_models(self.uri)

    @property
    def has_baseline(self) -> bool:
        return self.model_names["baseline"] is not None


def _open_store(output_dir: str):
    path = os.path.join(output_dir, METADATA_FILE)
    if not os.path.isfile(path):
        raise MissingInput(
            f"No ML Metadata store at {path}. Run the pipeline first "
            f"(python -m pipeline run --output {output_dir}) or pass the --output directory of a run.")
    return mlmd.open_store(mlmd.sqlite_config(path))


def _pipeline_names(store) -> List[str]:
    return [c.name for c in store.get_contexts_by_type("pipeline")]


def _latest_pipeline(store) -> str:
    """The pipeline whose newest execution is the most recent one in this store."""
    latest: Dict[str, int] = {}
    for context in store.get_contexts_by_type("pipeline"):
        times = [e.last_update_time_since_epoch for e in store.get_executions_by_context(context.id)]
        if times:
            latest[context.name] = max(times)
    if not latest:
        raise ReportError("The ML Metadata store has no pipeline runs yet. Run the pipeline first "
                         "(python -m pipeline run).")
    return max(latest, key=latest.get)


def _artifacts(store, execution_id: int, event_types: Sequence[int]) -> Dict[str, List[Any]]:
    """An execution's input or output artifacts by key (``examples``, ``model``, ...)."""
    events = [e for e in store.get_events_by_execution_ids([execution_id]) if e.type in event_types]
    by_id = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    artifacts: Dict[str, List[Any]] = {}
    for event in events:
        key = event.path.steps[0].key if event.path.steps else ""
        artifacts.setdefault(key, []).append(by_id[event.artifact_id])
    return artifacts


_INPUTS = (metadata_store_pb2.Event.INPUT,)
_OUTPUTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)


def _linked_executions(store, artifact_id: int, event_types: Sequence[int]) -> List[Any]:
    """Executions that produced (OUTPUT) or read (INPUT) an artifact, oldest first."""
    ids = sorted({e.execution_id for e in store.get_events_by_artifact_ids([artifact_id])
                  if e.type in event_types})
    return list(store.get_executions_by_id(ids)) if ids else []


def _first_uri(artifacts: Dict[str, List[Any]], key: str) -> Optional[str]:
    return artifacts[key][0].uri if artifacts.get(key) else None


def _property(item, name: str):
    """A custom property's value (string, int or float), or None."""
    if name not in item.custom_properties:
        return None
    value = item.custom_properties[name]
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def _family_of(trainer_execution, pipeline_name: str) -> str:
    """Family from the Trainer's run_fn (``models.<family>.trainer.run_fn``), else the pipeline name."""
    run_fn = _property(trainer_execution, "run_fn") if trainer_execution is not None else None
    match = re.match(r"^models\.(\w+)\.", run_fn or "")
    if match:
        return match.group(1)
    return pipeline_name[:-len("-pipeline")] if pipeline_name.endswith("-pipeline") else pipeline_name


def _pushed_path(store, blessing) -> Optional[str]:
    for pusher in _linked_executions(store, blessing.id, _INPUTS):
        for pushed in _artifacts(store, pusher.id, _OUTPUTS).get("pushed_model", []):
            if _property(pushed, "pushed"):
                return _property(pushed, "pushed_destination")
    return None


def _run_name(store, execution) -> Optional[str]:
    run_type = store.get_context_type("pipeline_run")
    runs = [c.name for c in store.get_contexts_by_execution(execution.id) if c.type_id == run_type.id]
    return runs[0] if runs else None


def _evaluation(store, pipeline_name: str, execution) -> Optional[Evaluation]:
    """Follow the Evaluator execution's lineage; None if it wrote no evaluation."""
    outputs = _artifacts(store, execution.id, _OUTPUTS)
    if not outputs.get("evaluation"):
        return None
    inputs = _artifacts(store, execution.id, _INPUTS)
    trainer = transform_graph = data_dir = None
    if inputs.get("model"):
        producers = _linked_executions(store, inputs["model"][0].id, _OUTPUTS)
        trainer = producers[0] if producers else None
    if trainer is not None:
        transform_graph = _first_uri(_artifacts(store, trainer.id, _INPUTS), "transform_graph")
    if inputs.get("examples"):
        producers = _linked_executions(store, inputs["examples"][0].id, _OUTPUTS)
        data_dir = _property(producers[0], "input_base") if producers else None
    blessing = (outputs.get("blessing") or [None])[0]
    blessed = _property(blessing, "blessed") if blessing is not None else None
    return Evaluation(
        pipeline_name=pipeline_name,
        family=_family_of(trainer, pipeline_name),
        uri=outputs["evaluation"][0].uri,
        execution_id=execution.id,
        state=mlmd.STATE_NAMES.get(execution.last_known_state, "UNKNOWN"),
        run_name=_run_name(store, execution),
        finished=datetime.datetime.fromtimestamp(execution.last_update_time_since_epoch / 1000),
        blessed=None if blessed is None else bool(blessed),
        model_uri=_first_uri(inputs, "model"),
        examples_uri=_first_uri(inputs, "examples"),
        transform_graph_uri=transform_graph,
        data_dir=data_dir,
        pushed_path=_pushed_path(store, blessing) if blessing is not None else None,
    )


def list_evaluations(output_dir: str, pipeline_name: Optional[str] = None) -> List[Evaluation]:
    """Every evaluation of the pipeline, oldest first (a cached re-run counts once).

    ``pipeline_name`` None: the pipeline with the most recent run in this output dir.
    """
    store = _open_store(output_dir)
    if pipeline_name is None:
        pipeline_name = _latest_pipeline(store)
    elif pipeline_name not in _pipeline_names(store):
        raise ReportError(f"No pipeline {pipeline_name!r} in {output_dir}; it has "
                         f"{_pipeline_names(store) or 'none'}. Pass one of those, or none for the latest.")
    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.{graph.EVALUATOR}")
    executions = store.get_executions_by_context(context.id) if context is not None else []
    evaluations: Dict[str, Evaluation] = {}
    for execution in sorted(executions, key=lambda e: e.id):
        if mlmd.STATE_NAMES.get(execution.last_known_state) not in _OK_STATES:
            continue
        evaluation = _evaluation(store, pipeline_name, execution)
        if evaluation is not None:
            evaluations.pop(evaluation.uri, None)   # keep the newest execution, in its place
            evaluations[evaluation.uri] = evaluation
    return list(evaluations.values())


def find_latest_evaluation(output_dir: str, pipeline_name: Optional[str] = None) -> Evaluation:
    """The newest Evaluator execution (complete or cached) that wrote an evaluation.

    ``pipeline_name`` None: the pipeline with the most recent run in this output dir.
    """
    evaluations = list_evaluations(output_dir, pipeline_name)
    if not evaluations:
        name = pipeline_name or _latest_pipeline(_open_store(output_dir))
        raise ReportError(
            f"Pipeline {name!r} in {output_dir} has no evaluation yet: its {graph.EVALUATOR} has not "
            f"completed (see {os.path.join(output_dir, 'logs')} for failed runs). Run the pipeline "
            "until the Evaluator completes.")
    return evaluations[-1]


# ----------------------------------------------------------------------------- loading


def load_result(evaluation: Evaluation, model: str = "candidate") -> tfma.EvalResult:
    """``tfma.load_eval_result`` for the candidate or the baseline of an evaluation."""
    names = evaluation.model_names
    if model == "baseline" and names["baseline"] is None:
        raise ValueError(f"Evaluation {evaluation.uri} has no baseline model.")
    return tfma.load_eval_result(evaluation.uri, model_name=names[model])


def load_time_series(evaluations: Sequence[Evaluation]) -> view_types.EvalResults:
    """Candidate results of several evaluations, for ``tfma.view.render_time_series``."""
    return tfma.make_eval_results([load_result(e) for e in evaluations], tfma.constants.MODEL_CENTRIC_MODE)


def slice_name(slice_key: Tuple) -> str:
    """``overall`` or ``feature=value[, ...]``, as in the run summary."""
    return "overall" if not slice_key else ", ".join(f"{k}={v}" for k, v in slice_key)


def _scalar(value: Any) -> Optional[float]:
    """A TFMA metric value as a float (NaN comes as the string "NaN"); None if not scalar."""
    if not isinstance(value, dict):
        return None
    if "doubleValue" in value:
        return float(value["doubleValue"])
    if "boundedValue" in value:
        return float(value["boundedValue"].get("value", math.nan))
    return None


def _metric_column(output_name: str, metric: str) -> str:
    return f"{output_name}/{metric}" if output_name else metric


def _slice_scalars(by_output: Dict[str, Dict[str, Dict[str, Any]]], sub_key: str = "") -> Dict[str, float]:
    """Scalar metrics of one slice and sub key, diffs against the baseline left out."""
    values = {}
    for output_name, by_sub_key in sorted(by_output.items()):
        for metric, value in sorted(by_sub_key.get(sub_key, {}).items()):
            number = _scalar(value)
            if number is not None and not metric.endswith(_DIFF_SUFFIX):
                values[_metric_column(output_name, metric)] = number
    return values


def _slice_diffs(by_output: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[str, float]:
    diffs = {}
    for output_name, by_sub_key in by_output.items():
        for metric, value in by_sub_key.get("", {}).items():
            if metric.endswith(_DIFF_SUFFIX) and _scalar(value) is not None:
                diffs[_metric_column(output_name, metric[:-len(_DIFF_SUFFIX)])] = _scalar(value)
    return diffs


def _find_slice(result: tfma.EvalResult, name: str):
    for slice_key, by_output in result.slicing_metrics:
        if slice_name(slice_key) == name:
            return by_output
    raise KeyError(f"No slice {name!r} in the evaluation; it has "
                   f"{sorted(slice_name(k) for k, _ in result.slicing_metrics)}.")


def key_metric(evaluation: Evaluation, metric_names: Sequence[str]) -> str:
    """The family's key metric, or (unknown family, renamed metric) the first accuracy-like one."""
    preferred = evaluation.report_family.key_metric
    if preferred in metric_names:
        return preferred
    candidates = [m for m in metric_names if "accuracy" in m] or [m for m in metric_names if m != COUNT_METRIC]
    if not candidates:
        raise ValueError(f"Evaluation {evaluation.uri} has no metric to rank slices by.")
    return candidates[0]


# ----------------------------------------------------------------------------- tables


def slice_metrics_frame(evaluation: Evaluation, model: str = "candidate") -> pd.DataFrame:
    """Every scalar metric per slice, worst slice (by the key metric) first.

    Columns: ``slice``, ``feature`` ("" for overall), ``example_count``, the key metric,
    then the other metrics. ``df.attrs["key_metric"]`` names the key metric.
    """
    rows = []
    for slice_key, by_output in load_result(evaluation, model).slicing_metrics:
        row = {"slice": slice_name(slice_key), "feature": ", ".join(k for k, _ in slice_key)}
        row.update(_slice_scalars(by_output))
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

    def highlight(row: pd.Series) -> List[str]:
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
    candidate_slice = _find_slice(load_result(evaluation, "candidate"), slice_)
    candidate = _slice_scalars(candidate_slice)
    baseline = _slice_scalars(_find_slice(load_result(evaluation, "baseline"), slice_))
    diffs = _slice_diffs(candidate_slice)
    rows = [{"metric": m, "candidate": candidate[m], "baseline": baseline.get(m, math.nan),
             "diff": diffs.get(m, candidate[m] - baseline.get(m, math.nan))} for m in candidate]
    return pd.DataFrame(rows, columns=columns)


def _threshold_words(threshold) -> str:
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


def _failed_checks(evaluation: Evaluation) -> Optional[set]:
    """(metric, is_diff, slice) of every failed threshold; None if TFMA wrote no validation."""
    try:
        result = tfma.load_validation_result(evaluation.uri)
    except (AssertionError, OSError, tf.errors.NotFoundError):   # TFMA asserts the file exists
        return None
    failed = set()
    for per_slice in result.metric_validations_per_slice:
        key = tuple((s.column, (getattr(s, s.WhichOneof("kind")))) for s in per_slice.slice_key.single_slice_keys)
        key = tuple((c, v.decode() if isinstance(v, bytes) else str(v)) for c, v in key)
        for failure in per_slice.failures:
            failed.add((failure.metric_key.name, failure.metric_key.is_diff, slice_name(key)))
    return failed


def validation_frame(evaluation: Evaluation) -> pd.DataFrame:
    """Every threshold of the gate, per slice it applies to: ``check, value, passed``.

    ``check`` is plain words ("sparse_categorical_accuracy (overall) >= 0.9");
    ``value`` is the candidate's metric (its diff for change thresholds).
    """
    eval_config = eval_config_writer.load_eval_run(evaluation.uri)[0]
    candidate = evaluation.model_names["candidate"] or ""
    result = load_result(evaluation)
    failed = _failed_checks(evaluation)
    rows = []
    thresholds = tfma.metrics.metric_thresholds_from_metrics_specs(eval_config.metrics_specs, eval_config)
    for metric_key, specs in thresholds.items():
        if metric_key.model_name != candidate or (metric_key.is_diff and not evaluation.has_baseline):
            continue
        for slicing_spec, threshold in specs:
            applies = tfma.slicer.SingleSliceSpec(spec=slicing_spec or tfma.SlicingSpec())
            for slice_key, by_output in result.slicing_metrics:
                if not applies.is_slice_applicable(slice_key):
                    continue
                name = slice_name(slice_key)
                values = _slice_diffs(by_output) if metric_key.is_diff else _slice_scalars(by_output)
                column = _metric_column(metric_key.output_name, metric_key.name)
                passed = None if failed is None else (metric_key.name, metric_key.is_diff, name) not in failed
                rows.append({"check": f"{metric_key.name} ({name}) {_threshold_words(threshold)}",
                             "value": values.get(column, math.nan), "passed": passed})
    return pd.DataFrame(rows, columns=["check", "value", "passed"])


def validation_summary(evaluation: Evaluation) -> Dict[str, Any]:
    """Blessed or not, and the failed thresholds in plain words (summary's wording)."""
    failures = validation_failures(evaluation.uri) if evaluation.blessed is False else []
    if evaluation.blessed is True:
        verdict = "Blessed: yes, every threshold passed."
    elif evaluation.blessed is False:
        verdict = "NOT blessed: " + ("; ".join(failures) if failures else "see the validation table.")
    else:
        verdict = "Blessing unknown: the Evaluator wrote no blessing."
    return {"blessed": evaluation.blessed, "failures": failures, "text": verdict}


def class_names(evaluation: Evaluation) -> Optional[List[str]]:
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
    manifest = _manifest(evaluation)
    return list(manifest.classes) if manifest is not None and manifest.classes else None


def _manifest(evaluation: Evaluation):
    from data.tfrecords import MANIFEST_NAME, DatasetManifest

    if not evaluation.data_dir or not os.path.isfile(os.path.join(evaluation.data_dir, MANIFEST_NAME)):
        return None
    return DatasetManifest.from_json(os.path.join(evaluation.data_dir, MANIFEST_NAME))


def per_class_frame(evaluation: Evaluation, slice_: str = "overall") -> pd.DataFrame:
    """Precision and recall per class (sub keys ``classId:N``) with class names."""
    by_output = _find_slice(load_result(evaluation), slice_)
    names = class_names(evaluation) or []
    rows = []
    for by_sub_key in by_output.values():
        for sub_key in by_sub_key:
            match = CLASS_SUB_KEY.match(sub_key)
            if match:
                class_id = int(match.group(1))
                name = names[class_id] if class_id < len(names) else str(class_id)
                rows.append({"class_id": class_id, "class": name, **_slice_scalars(by_output, sub_key)})
    frame = pd.DataFrame(rows)
    return frame.sort_values("class_id").reset_index(drop=True) if rows else frame


def confusion_matrix_frame(evaluation: Evaluation, slice_: str = "overall") -> pd.DataFrame:
    """Counts from TFMA's MultiClassConfusionMatrixPlot: rows actual, columns predicted."""
    plots = load_result(evaluation).plots or []
    matrix = next((by_output for key, by_output in plots if slice_name(key) == slice_), None)
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


# ----------------------------------------------------------------------------- figures


def plot_slice_metric(frame: pd.DataFrame, metric: Optional[str] = None, feature: Optional[str] = None,
                      title: Optional[str] = None) -> Figure:
    """Horizontal bars of one metric per slice, worst on top in red, overall as a line.

    ``feature`` restricts the bars to that slicing feature; more than ``MAX_BARS``
    slices are cut to the worst ones (ranked as in ``slice_metrics_frame``).
    """
    metric = metric or frame.attrs["key_metric"]
    overall = frame.loc[frame["slice"] == "overall", metric]
    bars = frame[frame["slice"] != "overall"]
    if feature is not None:
        bars = bars[bars["feature"] == feature]
    shown = bars.head(MAX_BARS)
    higher_is_better = frame.attrs.get("higher_is_better", True) if metric == frame.attrs.get("key_metric") else True
    worst_value = shown[metric].min() if higher_is_better else shown[metric].max()
    figure = Figure(figsize=(7, 0.3 * len(shown) + 1.4))
    axes = figure.add_subplot()
    colors = ["#d62728" if value == worst_value else "#4c72b0" for value in shown[metric]]
    axes.barh(range(len(shown)), shown[metric], color=colors)
    axes.set_yticks(range(len(shown)), [_short(s) for s in shown["slice"]])
    axes.invert_yaxis()
    subtitle = ""
    if not overall.empty and not math.isnan(overall.iloc[0]):
        axes.axvline(overall.iloc[0], color="black", linestyle="--", linewidth=1)
        subtitle = f"\ndashed: overall {overall.iloc[0]:.4f}"
    for position, value in enumerate(shown[metric]):
        axes.text(value, position, f" {value:.3f}", va="center", fontsize=8)
    if len(shown) and shown[metric].max() > 0:
        axes.set_xlim(0, shown[metric].max() * 1.12)   # room for the value labels
    cut = f" (worst {len(shown)} of {len(bars)})" if len(bars) > len(shown) else ""
    axes.set_title((title or f"{metric} by slice") + cut + subtitle, fontsize=10)
    axes.set_xlabel(metric)
    figure.tight_layout()
    return figure


def _short(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def plot_confusion_matrix(matrix: pd.DataFrame, title: str = "Confusion matrix (overall)") -> Figure:
    """Heatmap of ``confusion_matrix_frame``, counts written in the cells when they fit."""
    size = len(matrix)
    figure = Figure(figsize=(max(4.5, 0.45 * size + 2), max(4, 0.45 * size + 1.5)))
    axes = figure.add_subplot()
    image = axes.imshow(matrix.values, cmap="Blues")
    figure.colorbar(image, ax=axes, fraction=0.046, pad=0.04)
    axes.set_xticks(range(size), [_short(str(c), 12) for c in matrix.columns], rotation=90)
    axes.set_yticks(range(size), [_short(str(c), 12) for c in matrix.index])
    axes.set_xlabel("predicted")
    axes.set_ylabel("actual")
    if size <= 20:
        high = matrix.values.max() or 1
        for (row, column), count in np.ndenumerate(matrix.values):
            if count:
                axes.text(column, row, f"{count:.0f}", ha="center", va="center", fontsize=7,
                          color="white" if count > high / 2 else "black")
    axes.set_title(f"{title}, {matrix.values.sum():.0f} examples")
    figure.tight_layout()
    return figure


# ----------------------------------------------------------------------------- CNN pictures


def _eval_split_files(evaluation: Evaluation) -> List[str]:
    if not evaluation.examples_uri:
        raise FileNotFoundError(f"Evaluation {evaluation.uri} has no examples input in MLMD.")
    files = sorted(tf.io.gfile.glob(os.path.join(evaluation.examples_uri, "Split-eval", "*")))
    if not files:
        raise FileNotFoundError(f"No eval split under {evaluation.examples_uri}.")
    return files


def _image_shape(evaluation: Evaluation, model) -> Tuple[int, int, int]:
    manifest = _manifest(evaluation)
    if manifest is not None and manifest.image_shape:
        return tuple(int(v) for v in manifest.image_shape)
    _, height, width, channels = model.signatures["predict_image"].structured_input_signature[1]["images"].shape
    return int(height), int(width), int(channels)


def misclassified_examples(evaluation: Evaluation, sample_size: int = 300) -> pd.DataFrame:
    """Run the candidate's ``serving_default`` on the first ``sample_size`` eval examples.

    Returns the wrong ones: ``example_id, actual, predicted, confidence, image`` (HxWxC
    uint8). ``df.attrs["sampled"]`` is how many examples were classified. The candidate
    is the Trainer's model, i.e. the one the metrics describe, pushed or not.
    """
    from data import features
    from tfx.utils import path_utils

    if not evaluation.model_uri:
        raise FileNotFoundError(f"Evaluation {evaluation.uri} has no model input in MLMD.")
    model = tf.saved_model.load(path_utils.serving_model_path(evaluation.model_uri))
    files = _eval_split_files(evaluation)
    compression = "GZIP" if files[0].endswith(".gz") else ""
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=compression).take(sample_size)]
    outputs = model.signatures["serving_default"](examples=tf.constant(serialized))
    predicted = [c.decode() for c in outputs["classes"].numpy()]
    confidence = outputs["probabilities"].numpy().max(axis=-1)
    shape = _image_shape(evaluation, model)
    rows = []
    for record, guess, score in zip(serialized, predicted, confidence):
        feature = tf.train.Example.FromString(record).features.feature
        actual = feature[features.LABEL].bytes_list.value[0].decode()
        if actual != guess:
            pixels = np.asarray(feature[features.IMAGE].int64_list.value, dtype=np.uint8).reshape(shape)
            rows.append({"example_id": feature[features.EXAMPLE_ID].bytes_list.value[0].decode(),
                         "actual": actual, "predicted": guess, "confidence": float(score), "image": pixels})
    frame = pd.DataFrame(rows, columns=["example_id", "actual", "predicted", "confidence", "image"])
    frame.attrs["sampled"] = len(serialized)
    return frame


def plot_misclassified(examples: pd.DataFrame, max_images: int = 24, columns: int = 8) -> Figure:
    """Grid of misclassified images titled ``actual -> predicted (confidence)``."""
    shown = examples.head(max_images)
    rows = max(1, math.ceil(len(shown) / columns))
    figure = Figure(figsize=(1.4 * columns, 1.6 * rows + 0.6))
    for index, (_, example) in enumerate(shown.iterrows()):
        axes = figure.add_subplot(rows, columns, index + 1)
        image = example["image"]
        axes.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray" if image.shape[-1] == 1 else None,
                    vmin=0, vmax=255)
        axes.set_title(f"{_short(example['actual'], 8)} → {_short(example['predicted'], 8)}\n"
                       f"({example['confidence']:.2f})", fontsize=8)
        axes.axis("off")
    sampled = examples.attrs.get("sampled", "?")
    if shown.empty:
        figure.text(0.5, 0.5, "no misclassified example", ha="center", va="center")
    figure.suptitle(f"Misclassified: {len(examples)} of {sampled} eval examples "
                    f"(showing {len(shown)}; actual → predicted)", fontsize=10)
    figure.tight_layout()
    return figure


def cnn_pictures(evaluation: Evaluation) -> Dict[str, Figure]:
    """Image classifier: where classes are confused, and what the mistakes look like."""
    return {
        "Confusion matrix": plot_confusion_matrix(confusion_matrix_frame(evaluation)),
        "Misclassified eval images": plot_misclassified(misclassified_examples(evaluation)),
    }


# ----------------------------------------------------------------------------- seq2seq pictures


def seq2seq_pictures(evaluation: Evaluation) -> Dict[str, Figure]:
    """Text model (stub, generic): the key metric by document, worst documents first.

    Works off whatever slices the evaluation has: the first slicing feature of the family
    that is present (``document``), else the first feature sliced at all.
    """
    frame = slice_metrics_frame(evaluation)
    present = [f for f in frame["feature"].unique() if f]
    wanted = [f for f in evaluation.report_family.slicing_features if f in present]
    feature = (wanted or present or [None])[0]
    if feature is None:
        return {}
    metric = frame.attrs["key_metric"]
    return {f"{metric} by {feature}": plot_slice_metric(frame, feature=feature, title=f"{metric} by {feature}")}


def sample_generations(evaluation: Evaluation, count: int = 6, max_new_tokens: int = 12) -> pd.DataFrame:
    """Greedy continuations of held-out eval contexts by the candidate's ``generate``, next to the real text.

    Contexts are spread over the eval split (every n-th window), so several documents show.
    """
    from tfx.utils import path_utils

    if not evaluation.model_uri:
        raise FileNotFoundError(f"Evaluation {evaluation.uri} has no model input in MLMD.")
    model = tf.saved_model.load(path_utils.serving_model_path(evaluation.model_uri))
    files = _eval_split_files(evaluation)
    compression = "GZIP" if files[0].endswith(".gz") else ""
    records = [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=compression).take(2000)]
    picked = [tf.train.Example.FromString(r).features.feature for r in records[:: max(1, len(records) // count)]]
    picked = picked[:count]
    text = lambda feature, key: feature[key].bytes_list.value[0].decode()  # noqa: E731
    contexts = [text(f, "context") for f in picked]
    outputs = model.signatures["generate"](
        prompts=tf.constant(contexts), max_new_tokens=tf.constant(max_new_tokens, tf.int32),
        top_k=tf.constant(1, tf.int32), temperature=tf.constant(1.0, tf.float32))
    return pd.DataFrame({
        "document": [text(f, "document") for f in picked],
        "context": contexts,
        "generated": [c.decode() for c in outputs["continuations"].numpy()],
        "actual": [text(f, "target") for f in picked],
    })


# ----------------------------------------------------------------------------- family table


GENERIC = ReportFamily(name="generic", key_metric="accuracy", slicing_features=())

# Literals, not imports from models/: the report reads any output dir without loading model code.
REPORT_FAMILIES: Dict[str, ReportFamily] = {
    "cnn": ReportFamily(name="cnn", key_metric="sparse_categorical_accuracy",
                        slicing_features=("label", "brightness"), pictures=cnn_pictures,
                        class_vocabulary="label"),
    # The gate metric, top-5 accuracy, under TFMA's name (models/seq2seq/evaluation.py: GATE_METRIC).
    "seq2seq": ReportFamily(name="seq2seq", key_metric="sparse_top_k_categorical_accuracy",
                            slicing_features=("document", "position"), pictures=seq2seq_pictures),
}


def get_report_family(name: str) -> ReportFamily:
    """The family's report settings; unknown families get generic tables, no pictures."""
    return REPORT_FAMILIES.get(name, dataclasses.replace(GENERIC, name=name))


def family_pictures(evaluation: Evaluation) -> Dict[str, Figure]:
    pictures = evaluation.report_family.pictures
    return pictures(evaluation) if pictures else {}


# ----------------------------------------------------------------------------- HTML report


_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
tr.worst td { background: #fde0dd; font-weight: bold; }
tr.failed td { background: #fde0dd; } tr.passed td { background: #e5f5e0; }
.badge { display: inline-block; padding: .2em .7em; border-radius: .8em; font-weight: bold; }
.blessed { background: #c7e9c0; } .not-blessed { background: #fcbba1; } .unknown { background: #ddd; }
.meta td { text-align: left; border: none; padding: .1em .8em .1em 0; }
img { max-width: 100%; display: block; margin: .5em 0; }
.note { color: #666; font-size: .9em; } .error { color: #a50f15; }
"""


def figure_png(figure: Figure, dpi: int = 100) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def _img(figure: Figure, alt: str) -> str:
    data = base64.b64encode(figure_png(figure)).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _cell(column: str, value: Any) -> str:
    """Booleans as yes/no, counts as integers, other numbers to 4 decimals."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating, int, np.integer)):
        return _metric_text(column, float(value))
    return html.escape(str(value))


def _metric_text(metric: str, value: float, signed: bool = False) -> str:
    """Counts as integers, other metrics to 4 decimals; diffs with their sign."""
    if math.isnan(value):
        return "n/a"
    decimals = 0 if metric.endswith(COUNT_METRIC) or metric == "class_id" else 4
    return f"{value:{'+' if signed else ''}.{decimals}f}"


def html_table(frame: pd.DataFrame, table_id: str, row_classes: Optional[Sequence[str]] = None,
               text_columns: Optional[Sequence[str]] = None) -> str:
    """A plain, escaped HTML table; text columns (default: non-numeric ones) left-aligned."""
    if text_columns is None:
        text_columns = [c for c in frame.columns if frame[c].dtype == object]
    align = {c: ' class="text"' if c in text_columns else "" for c in frame.columns}
    head = "".join(f"<th{align[c]}>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for position, (_, row) in enumerate(frame.iterrows()):
        css = f' class="{row_classes[position]}"' if row_classes and row_classes[position] else ""
        cells = "".join(f"<td{align[c]}>{_cell(c, row[c])}</td>" for c in frame.columns)
        body.append(f"<tr{css}>{cells}</tr>")
    return (f'<table id="{table_id}" class="metrics"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _json_number(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def report_data(evaluation: Evaluation, slices: pd.DataFrame, comparison: pd.DataFrame,
                validation: Dict[str, Any]) -> Dict[str, Any]:
    """What ``report.json`` holds: machine-readable metrics for CI and dashboards."""
    per_slice = {row["slice"]: {k: _json_number(v) for k, v in row.items() if k not in ("slice", "feature")}
                 for _, row in slices.iterrows()}
    return {
        "pipeline": evaluation.pipeline_name,
        "family": evaluation.family,
        "run": evaluation.run_name,
        "evaluation_uri": evaluation.uri,
        "model_uri": evaluation.model_uri,
        "key_metric": slices.attrs["key_metric"],
        "overall": per_slice.get("overall", {}),
        "slices": per_slice,
        "baseline": {row["metric"]: _json_number(row["baseline"]) for _, row in comparison.iterrows()} or None,
        "blessed": evaluation.blessed,
        "validation_failures": validation["failures"],
        "pushed_path": evaluation.pushed_path,
    }


def _section(title: str, body: str, section_id: str) -> str:
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{body}</section>'


def _header(evaluation: Evaluation) -> str:
    badge_class = {True: "blessed", False: "not-blessed"}.get(evaluation.blessed, "unknown")
    badge_text = {True: "blessed", False: "NOT blessed"}.get(evaluation.blessed, "blessing unknown")
    meta = [("Pipeline", evaluation.pipeline_name), ("Model family", evaluation.family),
            ("Run", evaluation.run_name or "?"), ("Evaluated", f"{evaluation.finished:%Y-%m-%d %H:%M:%S}"),
            ("Evaluation", evaluation.uri), ("Model", evaluation.model_uri or "?"),
            ("Pushed", evaluation.pushed_path or "not pushed")]
    rows = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(str(v))}</td></tr>" for k, v in meta)
    return (f'<h1>Model evaluation: {html.escape(evaluation.pipeline_name)} '
            f'<span id="blessing" class="badge {badge_class}">{badge_text}</span></h1>'
            f'<table class="meta">{rows}</table>')


def _validation_section(validation: Dict[str, Any], checks: pd.DataFrame) -> str:
    headline = {True: "Blessed: every threshold passed.", False: "NOT blessed. Failed:"}.get(
        validation["blessed"], validation["text"])
    body = f"<p>{html.escape(headline)}</p>"
    if validation["failures"]:
        body += '<ul class="error">' + "".join(f"<li>{html.escape(f)}</li>" for f in validation["failures"]) + "</ul>"
    if not checks.empty:
        classes = ["" if p is None else ("passed" if p else "failed") for p in checks["passed"]]
        body += html_table(checks, "validation", classes)
    return _section("Validation (the gate)", body, "validation-result")


def _comparison_section(comparison: pd.DataFrame) -> str:
    if comparison.empty:
        body = '<p class="note">No baseline: nothing was served when this model was evaluated.</p>'
    else:
        shown = comparison.copy()
        for column in ("candidate", "baseline", "diff"):
            shown[column] = [_metric_text(m, v, signed=column == "diff")
                             for m, v in zip(comparison["metric"], comparison[column])]
        body = html_table(shown, "baseline-comparison", text_columns=["metric"])
    return _section("Candidate vs baseline (overall)", body, "comparison")


def _pictures_html(evaluation: Evaluation) -> str:
    """Family pictures; one that fails is reported in its place, the rest still render."""
    try:
        figures = family_pictures(evaluation)
    except Exception as error:  # noqa: BLE001 - a report with a note beats no report
        log.warning("Family pictures failed: %s", error, exc_info=True)
        return f'<p class="error">Could not draw the {evaluation.family} pictures: {html.escape(str(error))}</p>'
    return "".join(f"<h3>{html.escape(title)}</h3>{_img(figure, title)}" for title, figure in figures.items())


def render_html(evaluation: Evaluation) -> Tuple[str, Dict[str, Any]]:
    """The report page and its JSON data."""
    slices = slice_metrics_frame(evaluation)
    key = slices.attrs["key_metric"]
    comparison = comparison_frame(evaluation)
    validation = validation_summary(evaluation)
    worst = worst_slices(slices)
    per_class = per_class_frame(evaluation)
    body = [
        _header(evaluation),
        _validation_section(validation, validation_frame(evaluation)),
        _comparison_section(comparison),
        _section(f"Metrics per slice (worst {key} first)",
                 html_table(slices, "slice-metrics", ["worst" if w else "" for w in worst])
                 + _img(plot_slice_metric(slices), f"{key} by slice"), "slices"),
    ]
    if not per_class.empty:
        note = ('<p class="note">TFMA\'s binarized per-class metrics: a class counts as predicted when '
                "its probability is at least 0.5, so recall can be below the accuracy of the class's "
                "label slice (which takes the most likely class).</p>")
        body.append(_section("Per class (overall)", note + html_table(per_class, "per-class"), "classes"))
    body.append(_section(f"Family pictures ({evaluation.family})", _pictures_html(evaluation), "pictures"))
    if evaluation.family == "seq2seq":
        try:
            samples = html_table(sample_generations(evaluation), "generations",
                                 text_columns=["document", "context", "generated", "actual"])
        except Exception as error:  # noqa: BLE001 - a report with a note beats no report
            samples = f'<p class="error">Could not generate samples: {html.escape(str(error))}</p>'
        body.append(_section("Sample generations (greedy, held-out documents)", samples, "generations"))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Evaluation report: {html.escape(evaluation.pipeline_name)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}"
            f'<p class="note">Generated {datetime.datetime.now():%Y-%m-%d %H:%M:%S} by pipeline/report.py '
            "from ML Metadata and the TFMA output.</p></body></html>\n")
    return page, report_data(evaluation, slices, comparison, validation)


def write_report(output_dir: str, to_path: str, pipeline_name: Optional[str] = None) -> str:
    """Write the HTML report of the latest evaluation, and its metrics as JSON beside it.

    The JSON goes to ``to_path`` with a ``.json`` suffix (``report.html`` -> ``report.json``).
    Returns the HTML path.
    """
    to_path = os.path.abspath(to_path)
    if to_path.endswith(".json"):
        raise ReportError(f"{to_path}: the report is HTML (its JSON is written beside it); use a .html path.")
    evaluation = find_latest_evaluation(output_dir, pipeline_name)
    page, data = render_html(evaluation)
    os.makedirs(os.path.dirname(to_path), exist_ok=True)
    _write_atomically(to_path, page)
    _write_atomically(os.path.splitext(to_path)[0] + ".json", json.dumps(data, indent=2, allow_nan=False) + "\n")
    return to_path


def _write_atomically(path: str, text: str) -> None:
    """Write next to the target and rename, so a browser never sees half a report."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(temporary, path)

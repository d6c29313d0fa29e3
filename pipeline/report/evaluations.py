"""Find evaluations through ML Metadata: an Evaluator execution and what its lineage says.

The evaluation is found like the run summary finds it (Evaluator -> Trainer -> Transform,
ExampleGen, Pusher, read with ``pipeline/results/mlmd.py``), never by guessing artifact paths.
"""
import dataclasses
import datetime
import functools
import os

from stackenv.errors import ProjectError

from artifacts.tfma_results import evaluated_models
from components import data_facts
from pipeline import graph
from pipeline.report.families import ReportFamily, get_report_family
from pipeline.results import mlmd

_OK_STATES = ("COMPLETE", "CACHED")


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
    run_name: str | None           # pipeline_run context, e.g. 20261122-034924.452214
    finished: datetime.datetime
    blessed: bool | None
    model_uri: str | None          # the candidate: the Trainer's Model artifact
    examples_uri: str | None       # ExampleGen output that was evaluated
    examples_facts: dict | None    # the facts recorded on it (components/data_facts.py), None if none
    transform_graph_uri: str | None
    data_dir: str | None           # prepared data (manifest.json) that ExampleGen read
    pushed_path: str | None        # where the Pusher put this model, if it was pushed
    statistics_uri: str | None = None  # StatisticsGen's statistics of the evaluated examples

    @property
    def report_family(self) -> ReportFamily:
        return get_report_family(self.family)

    @functools.cached_property
    def model_names(self) -> dict[str, str | None]:
        """TFMA model names of candidate and baseline (the baseline is None if there was none)."""
        return evaluated_models(self.uri)

    @property
    def has_baseline(self) -> bool:
        return self.model_names["baseline"] is not None


def _family_of(trainer_execution, pipeline_name: str) -> str:
    """The family the Trainer recorded (pipeline/families/registry.py), else the pipeline name."""
    from pipeline.families import family_of_trainer_properties

    family = family_of_trainer_properties(trainer_execution) if trainer_execution is not None else None
    if family:
        return family
    return pipeline_name[:-len("-pipeline")] if pipeline_name.endswith("-pipeline") else pipeline_name


def _pushed_path(store, blessing) -> str | None:
    for pusher in mlmd.linked_executions(store, blessing.id, mlmd.INPUTS):
        for pushed in mlmd.artifacts_by_key(store, pusher.id).get("pushed_model", []):
            destination = mlmd.pushed_destination(pushed)
            if destination is not None:
                return destination
    return None


def _producer(store, artifacts, key: str):
    """The execution that wrote the first artifact under ``key`` (None if unknown)."""
    if not artifacts.get(key):
        return None
    producers = mlmd.linked_executions(store, artifacts[key][0].id, mlmd.OUTPUTS)
    return producers[0] if producers else None


def _statistics_uri(store, examples) -> str | None:
    """The statistics StatisticsGen computed from these examples (the newest, if several)."""
    if not examples:
        return None
    for consumer in sorted(mlmd.linked_executions(store, examples[0].id, mlmd.INPUTS), key=lambda e: -e.id):
        uri = mlmd.first_uri(mlmd.artifacts_by_key(store, consumer.id), "statistics")
        if uri:
            return uri
    return None


def _evaluation(store, pipeline_name: str, execution) -> Evaluation | None:
    """Follow the Evaluator execution's lineage; None if it wrote no evaluation."""
    outputs = mlmd.artifacts_by_key(store, execution.id)
    if not outputs.get("evaluation"):
        return None
    inputs = mlmd.artifacts_by_key(store, execution.id, mlmd.INPUTS)
    trainer = _producer(store, inputs, "model")
    example_gen = _producer(store, inputs, "examples")
    transform_graph = (mlmd.first_uri(mlmd.artifacts_by_key(store, trainer.id, mlmd.INPUTS), "transform_graph")
                       if trainer is not None else None)
    blessing = (outputs.get("blessing") or [None])[0]
    blessed = mlmd.custom_property(blessing, "blessed") if blessing is not None else None
    return Evaluation(
        pipeline_name=pipeline_name,
        family=_family_of(trainer, pipeline_name),
        uri=outputs["evaluation"][0].uri,
        execution_id=execution.id,
        state=mlmd.STATE_NAMES.get(execution.last_known_state, "UNKNOWN"),
        run_name=mlmd.run_name(store, execution),
        finished=datetime.datetime.fromtimestamp(execution.last_update_time_since_epoch / 1000),
        blessed=None if blessed is None else bool(blessed),
        model_uri=mlmd.first_uri(inputs, "model"),
        examples_uri=mlmd.first_uri(inputs, "examples"),
        examples_facts=data_facts.facts_of(inputs["examples"][0]) if inputs.get("examples") else None,
        transform_graph_uri=transform_graph,
        data_dir=mlmd.custom_property(example_gen, "input_base") if example_gen is not None else None,
        pushed_path=_pushed_path(store, blessing) if blessing is not None else None,
        statistics_uri=_statistics_uri(store, inputs.get("examples")),
    )


def _latest_pipeline(store) -> str:
    name = mlmd.latest_pipeline(store)
    if name is None:
        raise ReportError("The ML Metadata store has no pipeline runs yet. Run the pipeline first "
                          "(python -m pipeline run).")
    return name


def list_evaluations(output_dir: str, pipeline_name: str | None = None) -> list[Evaluation]:
    """Every evaluation of the pipeline, oldest first (a cached re-run counts once).

    ``pipeline_name`` None: the pipeline with the most recent run in this output dir.
    """
    store = mlmd.open_output_store(output_dir)
    if pipeline_name is None:
        pipeline_name = _latest_pipeline(store)
    elif pipeline_name not in mlmd.pipeline_names(store):
        raise ReportError(f"No pipeline {pipeline_name!r} in {output_dir}; it has "
                          f"{mlmd.pipeline_names(store) or 'none'}. Pass one of those, or none for the latest.")
    evaluations: dict[str, Evaluation] = {}
    for execution in mlmd.node_executions(store, pipeline_name, graph.EVALUATOR):
        if mlmd.STATE_NAMES.get(execution.last_known_state) not in _OK_STATES:
            continue
        evaluation = _evaluation(store, pipeline_name, execution)
        if evaluation is not None:
            evaluations.pop(evaluation.uri, None)   # keep the newest execution, in its place
            evaluations[evaluation.uri] = evaluation
    return list(evaluations.values())


def find_latest_evaluation(output_dir: str, pipeline_name: str | None = None) -> Evaluation:
    """The newest Evaluator execution (complete or cached) that wrote an evaluation.

    ``pipeline_name`` None: the pipeline with the most recent run in this output dir.
    """
    evaluations = list_evaluations(output_dir, pipeline_name)
    if not evaluations:
        name = pipeline_name or _latest_pipeline(mlmd.open_output_store(output_dir))
        raise ReportError(
            f"Pipeline {name!r} in {output_dir} has no evaluation yet: its {graph.EVALUATOR} has not "
            f"completed (see {os.path.join(output_dir, 'logs')} for failed runs). Run the pipeline "
            "until the Evaluator completes.")
    return evaluations[-1]

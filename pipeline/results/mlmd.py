"""Read what a run did from ML Metadata: executions per node, their state and outputs.

TFX records every node execution (COMPLETE, CACHED or FAILED) and its artifacts in
MLMD; the progress log and the run summary are read from there, not guessed from logs.
"""
import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from stackenv.errors import MissingInput, ProjectError

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

STATE_NAMES = {v: k for k, v in metadata_store_pb2.Execution.State.items()}
METADATA_FILE = "metadata.sqlite"   # in a local run's output directory
INPUTS = (metadata_store_pb2.Event.INPUT,)
OUTPUTS = (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)


@dataclasses.dataclass
class NodeExecution:
    node_id: str
    state: str                  # COMPLETE, CACHED, FAILED, RUNNING, ...
    seconds: float
    execution: metadata_store_pb2.Execution
    outputs: dict[str, list[metadata_store_pb2.Artifact]]

    @property
    def cached(self) -> bool:
        return self.state == "CACHED"


def open_store(connection_config: metadata_store_pb2.ConnectionConfig) -> metadata_store.MetadataStore:
    """The store, or a paragraph naming a damaged one (ML Metadata reports it as raw SQL: "file is not a
    database query: CREATE TABLE ...", "no such column ... CREATE INDEX ...")."""
    try:
        return metadata_store.MetadataStore(connection_config)
    except RuntimeError as error:
        path = connection_config.sqlite.filename_uri if connection_config.HasField("sqlite") else ""
        if not path or "database or disk is full" in str(error):  # disk full: pipeline/local/disk_full.py
            raise
        reason = str(error).replace("Error when executing query: ", "", 1).split(" query:", 1)[0].strip()
        raise DamagedStore(
            f"The ML Metadata store {path} cannot be read ({reason}): it is damaged or not a store this pipeline "
            "wrote (a file copied over it, an interrupted copy). The pushed models in the serving folder are not "
            f"affected. Restore {os.path.basename(path)} from a backup, or move it aside and run again: the run "
            "starts a new store (its cache starts empty).") from None


class DamagedStore(ProjectError):
    """metadata.sqlite exists but ML Metadata cannot open it."""


def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return config


def open_output_store(output_dir: str) -> metadata_store.MetadataStore:
    """The store of a local run's output directory; a missing one says how to get it."""
    path = os.path.join(output_dir, METADATA_FILE)
    if not os.path.isfile(path):
        raise MissingInput(
            f"No ML Metadata store at {path}. Run the pipeline first "
            f"(python -m pipeline run --output {output_dir}) or pass the --output directory of a run.")
    return open_store(sqlite_config(path))


def artifacts_by_key(store, execution_id: int,
                     event_types: Sequence[int] = OUTPUTS) -> dict[str, list[metadata_store_pb2.Artifact]]:
    """An execution's output (or, with ``INPUTS``, input) artifacts by key (``examples``, ``model``, ...)."""
    events = [e for e in store.get_events_by_execution_ids([execution_id]) if e.type in event_types]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    by_key: dict[str, list[metadata_store_pb2.Artifact]] = {}
    for event in events:
        key = event.path.steps[0].key if event.path.steps else ""
        by_key.setdefault(key, []).append(artifacts[event.artifact_id])
    return by_key


def first_uri(artifacts: dict[str, list[metadata_store_pb2.Artifact]], key: str) -> str | None:
    return artifacts[key][0].uri if artifacts.get(key) else None


def linked_executions(store, artifact_id: int, event_types: Sequence[int]) -> list[metadata_store_pb2.Execution]:
    """Executions that produced (``OUTPUTS``) or read (``INPUTS``) an artifact, oldest first."""
    ids = sorted({e.execution_id for e in store.get_events_by_artifact_ids([artifact_id])
                  if e.type in event_types})
    return list(store.get_executions_by_id(ids)) if ids else []


def custom_property(item, name: str) -> Any:
    """An artifact's or execution's custom property (string, int or float), or None."""
    if name not in item.custom_properties:
        return None
    value = item.custom_properties[name]
    return getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None


def pushed_destination(pushed_model: metadata_store_pb2.Artifact | None) -> str | None:
    """Where a Pusher's PushedModel artifact says the model went; None if it pushed nothing."""
    if pushed_model is None or not custom_property(pushed_model, "pushed"):
        return None
    return custom_property(pushed_model, "pushed_destination")


def run_name(store, execution) -> str | None:
    """The pipeline_run context of an execution, e.g. ``20261122-034924.452214``."""
    run_type = store.get_context_type("pipeline_run")
    runs = [c.name for c in store.get_contexts_by_execution(execution.id) if c.type_id == run_type.id]
    return runs[0] if runs else None


def pipeline_names(store) -> list[str]:
    return [c.name for c in store.get_contexts_by_type("pipeline")]


def latest_pipeline(store) -> str | None:
    """The pipeline whose newest execution is the most recent one in this store (None: no runs)."""
    latest: dict[str, int] = {}
    for context in store.get_contexts_by_type("pipeline"):
        times = [e.last_update_time_since_epoch for e in store.get_executions_by_context(context.id)]
        if times:
            latest[context.name] = max(times)
    return max(latest, key=latest.__getitem__) if latest else None


def node_executions(store, pipeline_name: str, node_id: str) -> list[metadata_store_pb2.Execution]:
    """Every execution of one node of a pipeline, oldest first."""
    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.{node_id}")
    executions = store.get_executions_by_context(context.id) if context is not None else []
    return sorted(executions, key=lambda e: e.id)


def _node_execution(store, node_id: str, execution) -> NodeExecution:
    seconds = max(0, execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
    return NodeExecution(node_id, STATE_NAMES.get(execution.last_known_state, "UNKNOWN"),
                         seconds, execution, artifacts_by_key(store, execution.id))


def latest_node_execution(store, pipeline_name: str, node_id: str) -> NodeExecution | None:
    executions = node_executions(store, pipeline_name, node_id)
    return _node_execution(store, node_id, executions[-1]) if executions else None


def latest_run(store, pipeline_name: str) -> dict[str, NodeExecution]:
    """Executions of the most recent run of ``pipeline_name``, by node id."""
    runs = [c for c in store.get_contexts_by_type("pipeline_run")]
    pipeline_ctx = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline_ctx is None or not runs:
        return {}
    pipeline_execution_ids = {e.id for e in store.get_executions_by_context(pipeline_ctx.id)}
    run_executions = []
    for run in sorted(runs, key=lambda c: c.create_time_since_epoch, reverse=True):
        run_executions = [e for e in store.get_executions_by_context(run.id)
                          if e.id in pipeline_execution_ids]
        if run_executions:
            break
    result = {}
    for execution in run_executions:
        node_contexts = [c for c in store.get_contexts_by_execution(execution.id)
                         if c.type_id == store.get_context_type("node").id]
        if node_contexts:
            node_id = node_contexts[0].name.split(".", 1)[-1]
            result[node_id] = _node_execution(store, node_id, execution)
    return result

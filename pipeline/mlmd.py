"""Read what a run did from ML Metadata: executions per node, their state and outputs.

TFX records every node execution (COMPLETE, CACHED or FAILED) and its artifacts in
MLMD; the progress log and the run summary are read from there, not guessed from logs.
"""
import dataclasses
from typing import Dict, List, Optional

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

STATE_NAMES = {v: k for k, v in metadata_store_pb2.Execution.State.items()}


@dataclasses.dataclass
class NodeExecution:
    node_id: str
    state: str                  # COMPLETE, CACHED, FAILED, RUNNING, ...
    seconds: float
    execution: metadata_store_pb2.Execution
    outputs: Dict[str, List[metadata_store_pb2.Artifact]]

    @property
    def cached(self) -> bool:
        return self.state == "CACHED"


def open_store(connection_config: metadata_store_pb2.ConnectionConfig) -> metadata_store.MetadataStore:
    return metadata_store.MetadataStore(connection_config)


def sqlite_config(path: str) -> metadata_store_pb2.ConnectionConfig:
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = path
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return config


def _outputs(store, execution_id: int) -> Dict[str, List[metadata_store_pb2.Artifact]]:
    events = [e for e in store.get_events_by_execution_ids([execution_id])
              if e.type in (metadata_store_pb2.Event.OUTPUT, metadata_store_pb2.Event.DECLARED_OUTPUT)]
    artifacts = {a.id: a for a in store.get_artifacts_by_id([e.artifact_id for e in events])}
    outputs: Dict[str, List[metadata_store_pb2.Artifact]] = {}
    for event in events:
        key = event.path.steps[0].key if event.path.steps else ""
        outputs.setdefault(key, []).append(artifacts[event.artifact_id])
    return outputs


def _node_execution(store, node_id: str, execution) -> NodeExecution:
    seconds = max(0, execution.last_update_time_since_epoch - execution.create_time_since_epoch) / 1000
    return NodeExecution(node_id, STATE_NAMES.get(execution.last_known_state, "UNKNOWN"),
                         seconds, execution, _outputs(store, execution.id))


def latest_node_execution(store, pipeline_name: str, node_id: str) -> Optional[NodeExecution]:
    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.{node_id}")
    if context is None:
        return None
    executions = store.get_executions_by_context(context.id)
    if not executions:
        return None
    return _node_execution(store, node_id, max(executions, key=lambda e: e.id))


def latest_run(store, pipeline_name: str) -> Dict[str, NodeExecution]:
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

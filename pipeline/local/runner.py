"""Run the pipeline locally: TFX's BeamDagRunner, components on Beam's DirectRunner (without its attempt at
PrismRunner, which fetches a binary from GitHub on Beam 2.77: ``compat.direct_runner_without_prism``).

The only additions to TFX's runner are a progress line per component (running, done or
cached, with its time, read from MLMD), a live line while a long one runs (counts done,
rate, ETA: ``progress.py``), and a record of which component failed, so a failure can be
reported in one paragraph instead of a Beam traceback.
"""
import logging
import time

from stackenv import compat

from tfx.orchestration.beam import beam_dag_runner
from tfx.orchestration.metadata import sqlite_metadata_connection_config

from data.tfrecords import DatasetManifest
from pipeline.config import PipelineConfig
from pipeline.graph import create_pipeline
from pipeline.local.progress import StepProgress
from pipeline.results import mlmd

log = logging.getLogger("pipeline")


class ComponentFailed(RuntimeError):
    """A pipeline component raised; ``node_id`` says which one."""

    def __init__(self, node_id: str, cause: BaseException):
        super().__init__(f"{node_id} failed: {type(cause).__name__}: {cause}")
        self.node_id = node_id
        self.cause = cause


class _ReportingNodeDoFn(compat.HookedNodeDoFn):
    """TFX's per-node DoFn, plus a progress line and the failing node's name."""

    def run_node(self, node: compat.NodeRun) -> None:
        log.info("▶ %s ...", node.node_id)
        started = time.monotonic()
        try:
            with StepProgress(node.node_id, totals=_expected(node)):
                node.run()
        except Exception as error:  # noqa: BLE001 - re-raised with the node's name
            log.error("✗ %s failed after %.1f s", node.node_id, time.monotonic() - started)
            raise ComponentFailed(node.node_id, error) from error
        outcome = "done"
        store = mlmd.open_store(node.mlmd_connection_config)
        execution = mlmd.latest_node_execution(store, node.pipeline_id, node.node_id)
        if execution is not None and execution.cached:
            outcome = "cached"
        log.info("✓ %s %s in %.1f s", node.node_id, outcome, time.monotonic() - started)


def _expected(node: compat.NodeRun) -> dict[str, int]:
    """The records a Beam step will read, from this pipeline's latest ExampleGen facts (none: no ETA)."""
    from components.data_facts import facts_of
    from pipeline.graph import EXAMPLE_GEN
    from pipeline.local.progress import expected_records

    try:
        store = mlmd.open_store(node.mlmd_connection_config)
        execution = mlmd.latest_node_execution(store, node.pipeline_id, EXAMPLE_GEN)
        examples = execution.outputs.get("examples") if execution is not None else None
        facts = facts_of(examples[0]) if examples else None
    except Exception:  # noqa: BLE001 - a display's estimate must never stop a run
        log.debug("no record counts for the progress line", exc_info=True)
        return {}
    return expected_records(dict((facts or {}).get("split_counts") or {}), node.node_id)


def reporting_runner() -> beam_dag_runner.BeamDagRunner:
    """TFX's BeamDagRunner with the progress lines and failure record above."""
    compat.count_records_read()  # the Beam steps' records, for the live line
    compat.skip_tfx_sdist_for_local_beam()
    compat.direct_runner_without_prism()  # no Prism binary fetched, the steps on the runner tested
    return compat.HookedBeamDagRunner(_ReportingNodeDoFn)


def run_local(config: PipelineConfig, dataset: DatasetManifest | None,
              runner: beam_dag_runner.BeamDagRunner | None = None) -> None:
    """Build the graph for local execution and run it to completion (or raise).

    ``dataset`` None: the pipeline's ExampleGen reads ``config.data`` (its size is not known
    before the run, so ``--beam-mode auto`` stays in_memory)."""
    num_examples = dataset.num_examples if dataset is not None else 0
    beam_args = config.beam_pipeline_args(num_examples)
    component_beam_args = config.component_beam_args(num_examples)
    log.info("Beam pipeline args: %s%s", " ".join(beam_args),
             "".join(f"; {name}: {' '.join(args)}" for name, args in component_beam_args.items()))
    pipeline = create_pipeline(
        config, dataset,
        metadata_connection_config=sqlite_metadata_connection_config(config.metadata_path),
        beam_pipeline_args=beam_args,
        component_beam_args=component_beam_args,
    )
    (runner or reporting_runner()).run(pipeline)


def ingested_dataset(config: PipelineConfig) -> DatasetManifest:
    """The facts the latest run's ExampleGen recorded on its Examples (components/data_facts.py), as a manifest."""
    from components.data_facts import facts_of, manifest_from_facts, pending_manifest
    from pipeline.graph import EXAMPLE_GEN

    store = mlmd.open_store(sqlite_metadata_connection_config(config.metadata_path))
    execution = mlmd.latest_node_execution(store, config.pipeline_name, EXAMPLE_GEN)
    examples = execution.outputs.get("examples") if execution is not None else None
    facts = facts_of(examples[0]) if examples else None
    return manifest_from_facts(facts, config.data or "bundled") if facts else pending_manifest(config.data)

"""Every hook into private TensorFlow, TFX and kfp APIs, in one place.

The project needs a few things those libraries do not expose publicly (a progress line
per TFX node, the anomalies of each split, a push recorded the way TFX's own Pusher
records it, timeouts on kfp's HTTP calls, AutoGraph leaving tf_keras alone). Each hook
below names the private API it touches, why, and the upstream version its code was read
from. ``tests/test_compat.py`` checks each one against the installed libraries and fails
naming the hook, so an upgrade that breaks one is caught by ``make test``, not by a run.

Nothing is imported at module load: TensorFlow, TFX and kfp are imported by the hook
that needs them, and the base classes below are built on first access (module
``__getattr__``), so ``models/`` can use the AutoGraph hook without importing TFX.

Versions read: the two stacks (docs/development.md, "Two stacks"): tensorflow 2.16.2 and 2.21.0,
tfx 1.16.0 and 1.21.0, TFMA 0.47.1 and 0.52.0, kfp 2.5.0 (kfp-server-api 2.0.5) and 2.16.1
(kfp-server-api 2.17.3). Every hook holds on both unless its docstring names the one it handles;
``tests/test_compat.py`` runs on both in CI (tests/conftest.py BOTH_STACKS), none skipped.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

#: Hook names, as the tests and failure messages call them.
AUTOGRAPH_RULES = "tensorflow autograph config.CONVERSION_RULES"
BEAM_NODE_RUN = "tfx BeamDagRunner._PIPELINE_NODE_DO_FN_CLS / PipelineNodeAsDoFn._run_node"
VALIDATOR_VALIDATE = "tfx ExampleValidator Executor._Validate"
PUSHER_MARK = "tfx Pusher Executor._MarkPushed / _MarkNotPushed"
EXECUTOR_CONTEXT = "tfx BaseExecutor._context / _log_startup"
KFP_REST_CLIENT = "kfp Client._pipelines_api.api_client.rest_client"
MULTI_WORKER_HEALTH = "tensorflow CollectiveAllReduceExtended._check_health_* class attributes"
DEVICE_DATASETS = ("tensorflow multi_device_iterator_ops._create_device_dataset (the per-device datasets a "
                   "distributed dataset's iterator builds, with default options)")
HUB_ESTIMATOR_STUB = "tensorflow_hub 0.15 imports tf.compat.v1.estimator (gone in TF 2.16)"
TFXIO_BATCHING = ("tfx_bsl absl flag tfxio_use_byte_size_batching and _BATCH_SIZE_CAP_WITH_BYTE_TARGET "
                  "(read by coders/batch_util.py)")
RECORD_SOURCE = "tfx_bsl RecordBasedTFXIO.RawRecordBeamSource (wrapped to count the records read)"
BEAM_DEPENDENCY_FLAGS = "tfx dependency_utils.make_beam_dependency_flags (called by BaseBeamExecutor.__init__)"
AUTOGRAPH_SOURCES = ("tensorflow autograph pyct/loader.py load_source: its temporary __autograph_generated_file*.py, "
                     "in sys.modules under the file's name, removed by an atexit handler (TF 2.16 and 2.21)")
TFMA_CONFIG_PROTOS = "tensorflow_model_analysis top-level config protos (EvalConfig, MetricConfig, ...)"
TFMA_SIGNATURE_CALL = ("tensorflow_model_analysis utils/model_util.get_callable (the module global "
                       "ModelSignaturesDoFn._batch_reducible_process calls a signature of serialized examples with)")
TRANSFORM_WRITE = ("tfx transform executor module global TransformProcessor (instantiated by Executor.Do) "
                   "and TransformProcessor._EncodeAndWrite / _RecordBatchToExamplesFn")
DIRECT_RUNNER_PRISM = ("apache_beam StandardOptions.DEFAULT_RUNNER (the runner of a pipeline given none) and "
                       "SwitchingDirectRunner.is_interactive() (run_pipeline tries PrismRunner unless it was called)")


# --------------------------------------------------------------------------- AutoGraph

def autograph_skips(prefix: str) -> bool:
    """Whether AutoGraph's rules leave modules under ``prefix`` unconverted (our rule is first).

    Hook AUTOGRAPH_RULES: ``tensorflow.python.autograph.core.config.CONVERSION_RULES`` (a
    module-level tuple read on every conversion by ``impl/conversion.py``) and
    ``config_lib.DoNotConvert._prefix``. There is no public API to allowlist a package.
    """
    from tensorflow.python.autograph.core import config

    return any(_is_skip_rule(rule, prefix) for rule in config.CONVERSION_RULES)


def set_autograph_skip(prefix: str, skip: bool) -> None:
    """Put (or remove) a ``DoNotConvert(prefix)`` rule at the head of AutoGraph's rules.

    Why: TF 2.16's rules skip the ``keras`` package but not ``tf_keras``, where Keras 2
    lives on this stack, so the first ``fit`` of every process transpiles tf_keras itself
    (the cost is measured in benchmarks/README.md). Hook AUTOGRAPH_RULES.
    """
    from tensorflow.python.autograph.core import config, config_lib

    rules = tuple(rule for rule in config.CONVERSION_RULES if not _is_skip_rule(rule, prefix))
    config.CONVERSION_RULES = ((config_lib.DoNotConvert(prefix),) + rules) if skip else rules


def _is_skip_rule(rule: Any, prefix: str) -> bool:
    from tensorflow.python.autograph.core import config_lib

    return isinstance(rule, config_lib.DoNotConvert) and getattr(rule, "_prefix", None) == prefix


AUTOGRAPH_SOURCE_PREFIX = "__autograph_generated_file"


def remove_autograph_sources() -> list[str]:
    """Delete the source files AutoGraph wrote for this process's converted functions; their paths.

    Why: AutoGraph writes each converted function to ``$TMPDIR/__autograph_generated_file*.py`` and
    deletes it in an ``atexit`` handler, which a process ending with ``os._exit`` (every command, to skip
    seconds of TensorFlow teardown; a pod's step, where tensorflow-io aborts in teardown) never runs: each
    run left dozens of files in /tmp. Hook AUTOGRAPH_SOURCES: ``loader.load_source`` registers each module
    in ``sys.modules`` under its file's name (TF 2.16 and 2.21), which is how they are found here. Only
    this process's own files are removed: another process may still read its own (tracebacks, inspect).
    """
    removed = []
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None) if name.startswith(AUTOGRAPH_SOURCE_PREFIX) else None
        if path and os.path.basename(path).startswith(AUTOGRAPH_SOURCE_PREFIX):
            try:
                os.remove(path)
            except OSError:
                continue  # already gone (a tmp cleaner) or not ours to remove
            removed.append(path)
    return removed


# --------------------------------------------------------------------------- TFX Beam runner

@dataclasses.dataclass
class NodeRun:
    """One TFX node about to run in BeamDagRunner; ``run()`` runs it (raises on failure)."""

    node_id: str
    pipeline_id: str
    mlmd_connection_config: Any
    run: Callable[[], None]


def _hooked_node_do_fn() -> type:
    """Base of a BeamDagRunner node DoFn whose ``run_node(NodeRun)`` wraps each node's run.

    Hook BEAM_NODE_RUN: ``tfx.orchestration.beam.beam_dag_runner.PipelineNodeAsDoFn._run_node``
    and its attributes ``_node_id``, ``_pipeline_info``, ``_mlmd_connection_config`` (set in
    ``__init__``). Why: TFX has no per-node callback; the local runner prints a progress
    line per node and records which node failed, for the one-paragraph failure report.
    """
    from tfx.orchestration.beam import beam_dag_runner

    class HookedNodeDoFn(beam_dag_runner.PipelineNodeAsDoFn):
        def _run_node(self) -> None:
            self.run_node(NodeRun(node_id=self._node_id, pipeline_id=self._pipeline_info.id,
                                  mlmd_connection_config=self._mlmd_connection_config,
                                  run=super()._run_node))

        def run_node(self, node: NodeRun) -> None:
            node.run()

    return HookedNodeDoFn


def _hooked_beam_dag_runner() -> type:
    """BeamDagRunner taking the node DoFn class to use (subclass of ``HookedNodeDoFn``).

    Hook BEAM_NODE_RUN: ``BeamDagRunner._PIPELINE_NODE_DO_FN_CLS``, the class attribute
    ``_build_graph`` instantiates for every node.
    """
    from tfx.orchestration.beam import beam_dag_runner

    class HookedBeamDagRunner(beam_dag_runner.BeamDagRunner):
        # BeamDagRunner.__new__ returns the legacy runner when given positional arguments;
        # this runner is always the IR-based one, as TFX's __new__ builds it.
        def __new__(cls, node_do_fn_cls: type) -> Any:
            return super(beam_dag_runner.BeamDagRunner, cls).__new__(cls)

        def __init__(self, node_do_fn_cls: type) -> None:
            super().__init__()
            self._PIPELINE_NODE_DO_FN_CLS = node_do_fn_cls

    return HookedBeamDagRunner


# --------------------------------------------------------------------------- tfx_bsl record reads

#: What the counter of :func:`count_records_read` is called on the progress line.
RECORDS_READ = "records read"
_COUNT_EVERY = 256


def count_records_read() -> None:
    """Count every record StatisticsGen, Transform and the Evaluator read (``stackenv.progress``).

    Hook RECORD_SOURCE: ``tfx_bsl.tfxio.record_based_tfxio.RecordBasedTFXIO.RawRecordBeamSource``,
    which ``BeamSource`` (TFDV, TFT, TFMA) goes through for every Examples artifact, is
    replaced by itself followed by a counting DoFn (records pass unchanged). Why: those
    steps are TFX's Beam jobs, Beam's metrics are readable only once a job is over, and a
    long step must show how far it is. Idempotent; for the process's lifetime (the local runner).
    """
    import apache_beam as beam
    from tfx_bsl.tfxio import record_based_tfxio

    cls = record_based_tfxio.RecordBasedTFXIO
    if getattr(cls.RawRecordBeamSource, "_counts_records", False):
        return
    original = cls.RawRecordBeamSource

    def counted(self: Any) -> Any:
        source = original(self)

        @beam.ptransform_fn
        def _read_and_count(pcoll_or_pipeline: Any) -> Any:
            return (pcoll_or_pipeline | "ReadRawRecords" >> source
                    | "CountForProgress" >> beam.ParDo(_CountRecords()))

        return _read_and_count()

    counted._counts_records = True  # type: ignore[attr-defined]
    cls.RawRecordBeamSource = counted


def _count_records_dofn() -> type:
    from stackenv import progress

    import apache_beam as beam

    class CountRecords(beam.DoFn):
        def start_bundle(self) -> None:
            self._pending = 0

        def process(self, record: Any) -> Any:
            self._pending += 1
            if self._pending >= _COUNT_EVERY:
                progress.count(RECORDS_READ, self._pending)
                self._pending = 0
            yield record

        def finish_bundle(self) -> None:
            if self._pending:
                progress.count(RECORDS_READ, self._pending)
                progress.flush()
                self._pending = 0

    return CountRecords


def _CountRecords() -> Any:  # noqa: N802 (a DoFn's constructor)
    return __getattr__("CountRecords")()


# --------------------------------------------------------------------------- TFX's sdist per executor

#: Beam runners whose workers are processes of this machine's Python environment.
_LOCAL_RUNNERS = frozenset({"", "DirectRunner", "SwitchingDirectRunner", "BundleBasedDirectRunner"})


def workers_share_this_environment(beam_args: list[str]) -> bool:
    """Whether Beam's workers run from the interpreter and packages of this process: the
    DirectRunner (both modes), or a PortableRunner with the embedded job server
    (``--job_endpoint=embed``, the project's ``beam-pool``)."""
    from apache_beam.options.pipeline_options import PipelineOptions

    options = PipelineOptions(flags=list(beam_args)).get_all_options()
    runner = str(options.get("runner") or "").rsplit(".", 1)[-1]
    return runner in _LOCAL_RUNNERS or (runner == "PortableRunner" and options.get("job_endpoint") == "embed")


def skip_tfx_sdist_for_local_beam() -> None:
    """Stop every Beam executor from packaging TFX when Beam's workers already have it.

    Hook BEAM_DEPENDENCY_FLAGS: ``BaseBeamExecutor.__init__`` calls
    ``tfx.utils.dependency_utils.make_beam_dependency_flags`` whenever Beam args are set and
    none names a dependency; that copies the installed ``tfx`` tree and runs ``setup.py
    sdist`` in a subprocess, so the workers of a remote runner (Dataflow) can install TFX.
    A local run (and a Kubeflow step, whose image has TFX) paid it in every Beam component:
    seconds of fixed cost per step, the Evaluator's largest (docs/history/benchmarks-log.md, "The
    Evaluator"). Replaced by a check that keeps TFX's behaviour for any other runner.
    Idempotent; for the process's lifetime.
    """
    from tfx.utils import dependency_utils

    original = dependency_utils.make_beam_dependency_flags
    if getattr(original, "_skips_local", False):
        return

    def dependency_flags(beam_pipeline_args: list[str]) -> list[str]:
        if workers_share_this_environment(beam_pipeline_args):
            return beam_pipeline_args
        return original(beam_pipeline_args)

    dependency_flags._skips_local = True  # type: ignore[attr-defined]
    dependency_utils.make_beam_dependency_flags = dependency_flags


# --------------------------------------------------------------------------- Beam's DirectRunner and Prism

def direct_runner_without_prism() -> None:
    """Make Beam's DirectRunner, told not to try Prism, the runner of every pipeline given none.

    Hook DIRECT_RUNNER_PRISM: ``apache_beam.options.pipeline_options.StandardOptions.DEFAULT_RUNNER``, the
    runner name ``beam.Pipeline`` creates when the options name none (TFX's BeamDagRunner builds its DAG
    pipeline with no options, and the components' Beam args name none unless a user's do), here the dotted
    path of :func:`new_direct_runner`. Why: since apache/beam#34612 (in Beam 2.77, not in 2.59) the
    DirectRunner first hands a batch pipeline to PrismRunner, which downloads its Go binary from GitHub
    (``~/.apache_beam/cache/prism``) and runs the pipeline in it; only when that fails (no network: every step
    of every run here) does it fall back to the FnApiRunner. So on ``tfx-1.21`` a machine with internet
    fetched a binary at run time and ran each step on another runner than the one tested, and one without
    tried to. Beam's advice (the PR) is to pin the FnApiRunner; this keeps the DirectRunner's own choice of
    it instead (its pipeline options handed to the workers, its fallback for what the FnApiRunner cannot
    run), on both stacks. A ``--runner`` a user passes still wins. Idempotent; for the process's lifetime
    (the local runner, a Kubeflow step).
    """
    from apache_beam.options.pipeline_options import StandardOptions

    StandardOptions.DEFAULT_RUNNER = f"{__name__}.{new_direct_runner.__name__}"


def new_direct_runner() -> Any:
    """A DirectRunner that will not try Prism (``direct_runner_without_prism``).

    The runner stays of Beam's own class, not a subclass: TensorFlow Transform looks its TF session settings up
    by the exact type of ``pipeline.runner`` (``impl._DEFAULT_TENSORFLOW_CONFIG_BY_BEAM_RUNNER_TYPE``), and a
    subclass made Transform 40 % slower on ``tfx-1.16``. Beam 2.77's ``SwitchingDirectRunner.is_interactive()``
    sets the one flag its ``run_pipeline`` reads to decline Prism (``_is_interactive``; nothing else reads it);
    Beam 2.59 has neither the method nor the attempt.
    """
    from apache_beam.runners.direct.direct_runner import DirectRunner

    runner = DirectRunner()
    if hasattr(runner, "is_interactive"):
        runner.is_interactive()
    return runner


# --------------------------------------------------------------------------- tfx_bsl batching

@contextlib.contextmanager
def byte_size_batching(max_records: int | None = None) -> Iterator[None]:
    """Inside: tfx_bsl's Beam sources built now batch records by size (20 MiB, at most
    ``max_records`` records, tfx_bsl's 8,192 when None) instead of Beam's adaptive
    ``BatchElements`` (which starts at one record and stays small when the work downstream
    is slow per batch).

    Hook TFXIO_BATCHING: the absl flag ``tfxio_use_byte_size_batching`` that
    ``tfx_bsl.coders.batch_util.GetBatchElementsKwargs`` reads when a source is built (only
    once absl's flags count as parsed, hence the parse of that one flag), and the module
    constant ``_BATCH_SIZE_CAP_WITH_BYTE_TARGET`` it divides the 20 MiB by (each record counts
    as at least 20 MiB / cap bytes). Why: the Evaluator's model calls and TFMA's per-batch work
    run on tiny batches otherwise; and the cap, because 20 MiB of small serialized records
    (a text window is ~100 bytes) is 8,192 records whose model outputs can be a thousand times
    larger (docs/history/benchmarks-log.md, "The Evaluator's memory").
    """
    from absl import flags
    from tfx_bsl.coders import batch_util

    before = flags.FLAGS["tfxio_use_byte_size_batching"].value
    cap_before = batch_util._BATCH_SIZE_CAP_WITH_BYTE_TARGET
    if not flags.FLAGS.is_parsed():
        flags.FLAGS(["tfxio"], known_only=True)
    flags.FLAGS.tfxio_use_byte_size_batching = True
    if max_records is not None:
        batch_util._BATCH_SIZE_CAP_WITH_BYTE_TARGET = max(1, int(max_records))
    try:
        yield
    finally:
        flags.FLAGS.tfxio_use_byte_size_batching = before
        batch_util._BATCH_SIZE_CAP_WITH_BYTE_TARGET = cap_before


# --------------------------------------------------------------------------- TFMA's model calls

@contextlib.contextmanager
def tfma_calls_signatures_by_name() -> Iterator[None]:
    """Inside: TFMA calls a signature whose one input is a batch of serialized examples with that
    input's name (``serving_default(examples=batch)``), not positionally.

    Hook TFMA_SIGNATURE_CALL: ``ModelSignaturesDoFn._batch_reducible_process`` fetches the
    signature with the module global ``get_callable`` and, for serialized examples, calls
    ``signature(tf.constant(inputs, dtype=tf.string))`` (tensorflow_model_analysis/utils/
    model_util.py:1002@v0.47.1, :1076@v0.52.0). A loaded SavedModel's signature takes keywords
    only, so TensorFlow first fails to bind the call to its structured signature, formats a
    TypeError whose message holds the repr of the whole batch, and only then calls the flat
    signature (concrete_function.py ``_call_impl``, TF 2.16 and 2.21). Formatting the batch costs
    more than running the model on it, for each model and both of the Evaluator's signatures (the
    transform and the prediction): docs/history/benchmarks-log.md, "TFMA's model calls". Anything
    else ``get_callable`` returns is returned as it is.
    """
    from tensorflow_model_analysis.utils import model_util

    tfma_get_callable = model_util.get_callable

    def get_callable(model: Any, signature_name: str | None = None, required: bool = True) -> Any:
        fn = tfma_get_callable(model, signature_name, required)
        name = _single_string_input(fn)
        return fn if name is None else _CallByName(fn, name)

    model_util.get_callable = get_callable
    try:
        yield
    finally:
        model_util.get_callable = tfma_get_callable


def _single_string_input(fn: Any) -> str | None:
    """The name of ``fn``'s one keyword input when it is a batch of strings, else None."""
    import tensorflow as tf

    signature = getattr(fn, "structured_input_signature", None)
    if not isinstance(signature, tuple) or len(signature) != 2 or signature[0] or len(signature[1]) != 1:
        return None
    ((name, spec),) = signature[1].items()
    if isinstance(spec, tf.TensorSpec) and spec.dtype == tf.string and spec.shape.rank == 1:
        return name
    return None


class _CallByName:
    """``fn`` whose one positional argument is passed as its input ``name``; everything else is ``fn``'s."""

    def __init__(self, fn: Any, name: str):
        self._fn, self._name = fn, name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs:
            return self._fn(**{self._name: args[0]})
        return self._fn(*args, **kwargs)

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self._fn, attribute)


# --------------------------------------------------------------------------- Transform's write

@contextlib.contextmanager
def transform_writes_with(write: Callable[[str], Any]) -> Iterator[None]:
    """Inside: TFX's Transform writes its transformed TFRecords with ``write(output_path)``, a
    PTransform of serialized examples, in place of ``beam.io.WriteToTFRecord(output_path,
    file_name_suffix=".gz")``; other materialization formats are TFX's.

    Hook TRANSFORM_WRITE: ``Executor.Do`` runs ``TransformProcessor().Transform``, the module
    global, not ``self`` (tfx/components/transform/executor.py:641@v1.16.0), and its
    ``_EncodeAndWrite`` (:703) builds the write; inside, the module global is a subclass with our
    ``_EncodeAndWrite``. Only the graph's construction sees it: Beam pickles the DoFns by
    reference, and ``_RecordBatchToExamplesFn`` is TFX's own.
    """
    import apache_beam as beam
    from tfx.components.transform import executor, labels

    tfx_processor = executor.TransformProcessor

    class Processor(tfx_processor):  # type: ignore[misc,valid-type]
        @staticmethod
        @beam.ptransform_fn
        def _EncodeAndWrite(pcoll, schema, file_format: str, output_path: str):  # noqa: N802 (TFX's name)
            if file_format != labels.FORMAT_TFRECORD:
                return pcoll | tfx_processor._EncodeAndWrite(schema, file_format, output_path)
            return (pcoll
                    | "EncodeAndSerialize" >> beam.ParDo(tfx_processor._RecordBatchToExamplesFn(schema))
                    | "ExtractExamples" >> beam.Values()
                    | "WriteToTFRecord" >> write(output_path))

    executor.TransformProcessor = Processor
    try:
        yield
    finally:
        executor.TransformProcessor = tfx_processor


# --------------------------------------------------------------------------- TFX ExampleValidator

def _anomaly_hook_validator_executor() -> type:
    """ExampleValidator executor calling ``on_split_validated(anomalies, split_dir)`` per split.

    Hook VALIDATOR_VALIDATE: ``tfx.components.example_validator.executor.Executor._Validate
    (inputs, outputs) -> Anomalies``, called once per split by ``Do`` with
    ``outputs[labels.SCHEMA_DIFF_PATH]`` the split's output folder. Why: ``Do`` only writes
    the anomalies to files; the project's validator stops the run on them and needs them
    per split for its message.
    """
    from tfx.components.example_validator import executor as validator_executor
    from tfx.components.example_validator import labels

    class AnomalyHookValidatorExecutor(validator_executor.Executor):
        def _Validate(self, inputs: dict[str, Any], outputs: dict[str, Any]):
            anomalies = super()._Validate(inputs, outputs)
            self.on_split_validated(anomalies, outputs[labels.SCHEMA_DIFF_PATH])
            return anomalies

        def on_split_validated(self, anomalies: Any, split_dir: str) -> None:
            """Override: called with each split's Anomalies proto and output folder."""

    return AnomalyHookValidatorExecutor


# --------------------------------------------------------------------------- TFX Pusher

def mark_pushed(executor: Any, pushed_model: Any, destination: str, version: str | None) -> None:
    """Record a push on the PushedModel artifact exactly as TFX's Pusher does.

    Hook PUSHER_MARK: ``tfx.components.pusher.executor.Executor._MarkPushed(model_push,
    pushed_destination, pushed_version)``, which sets the ``pushed``,
    ``pushed_destination`` and ``pushed_version`` custom properties that TFX (and this
    project's summary) read. Why: the atomic Pusher replaces ``Do`` but must leave the same
    record; re-implementing it would drift from the property names TFX reads.
    """
    executor._MarkPushed(pushed_model, pushed_destination=destination, pushed_version=version)


def mark_not_pushed(executor: Any, pushed_model: Any) -> None:
    """``Executor._MarkNotPushed(model_push)``: ``pushed`` = 0 (hook PUSHER_MARK)."""
    executor._MarkNotPushed(pushed_model)


def log_executor_startup(executor: Any, inputs: dict, outputs: dict, exec_properties: dict) -> None:
    """``BaseExecutor._log_startup``, which every TFX executor's ``Do`` calls first (hook EXECUTOR_CONTEXT)."""
    executor._log_startup(inputs, outputs, exec_properties)


def pipeline_run_id(executor: Any) -> str | None:
    """The run id of the executing pipeline, None outside a pipeline run.

    Hook EXECUTOR_CONTEXT: ``BaseExecutor._context`` (a ``BaseExecutor.Context``, set by
    ``__init__``) and its ``pipeline_run_id``. Why: push_info.json names the run that pushed.
    """
    return getattr(getattr(executor, "_context", None), "pipeline_run_id", None)


# --------------------------------------------------------------------------- kfp client

def bound_kfp_client_io(client: Any, connect_timeout: float, read_timeout: float,
                        read_body: Callable[[Any], bytes] | None = None) -> bool:
    """Give a ``kfp.Client``'s HTTP calls timeouts, few retries and (``read_body``) a bounded body read;
    kfp 2.5-2.16 (kfp_server_api 2.0.5-2.17) expose none of them.

    Hook KFP_REST_CLIENT: ``kfp.Client._pipelines_api.api_client.rest_client`` (a
    ``kfp_server_api.rest.RESTClientObject``; the client's APIs share one ``api_client``),
    its ``pool_manager`` (urllib3 1.26 or 2.x) and ``request(..., _request_timeout=None)``, which
    ``GET``/``POST``/... call through ``self.request``. kfp_server_api waits forever unless
    a call passes ``_request_timeout``, which kfp.Client never forwards; so ``request`` gets
    that default here. ``request`` calls ``pool_manager.request(method, url, ...,
    preload_content=True)`` and wraps the answer in ``RESTResponse`` (``status``, ``reason``,
    ``data``, ``getheaders()``), which reads the whole body however long it is; with ``read_body``
    the pool is asked for the body unread and gets it from ``read_body(response)`` (which may
    stop and raise), handed back as an already-read urllib3 response. Returns False (leaving
    the client alone) when the client has no such layout, e.g. a test double; the test of this
    hook catches a kfp that changed it.
    """
    import io

    import urllib3

    try:
        rest = client._pipelines_api.api_client.rest_client
        pool, request = rest.pool_manager, rest.request
    except AttributeError:
        return False
    # Retry refused connects briefly; never re-send a POST after a read error (duplicates).
    pool.connection_pool_kw["retries"] = urllib3.Retry(total=2, connect=2, read=0, status=0,
                                                       redirect=False, backoff_factor=0.5)
    pool.clear()

    def request_with_timeout(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(*args, _request_timeout=_request_timeout or (connect_timeout, read_timeout), **kwargs)

    rest.request = request_with_timeout
    if read_body is not None:
        unbounded = pool.request

        def request_bounded_body(method: str, url: str, *args: Any, preload_content: bool = True,
                                 **kwargs: Any) -> Any:
            response = unbounded(method, url, *args, preload_content=False, **kwargs)
            if not preload_content:
                return response
            body = read_body(response)  # decoded already: the copy must not decode it again
            return urllib3.HTTPResponse(body=io.BytesIO(body), headers=response.headers, status=response.status,
                                        reason=response.reason, preload_content=True, decode_content=False)

        pool.request = request_bounded_body
    return True


# --------------------------------------------------------------------------- distributed datasets

def device_datasets_without_autotune() -> None:
    """Turn tf.data autotuning off in the per-device datasets a distributed dataset's iterator builds.

    Why: ``strategy.experimental_distribute_dataset`` (what Keras' ``fit`` calls under every
    strategy but the default one) iterates through a ``MultiDeviceIterator``, which builds one
    dataset per device (a generator and a fixed prefetch) with default options, whatever the
    input's say. Autotuning is on there, so each per-device iterator runs a model thread that
    sleeps through an optimisation period growing towards a minute, and deleting the iterator,
    which ``fit`` does as it returns and after every validation, waits for that sleep to end:
    seconds to tens of seconds at the end of a fit, on TF 2.16 and 2.21 alike (benchmarks/README.md).
    Nothing there is tunable (the prefetch depth is fixed), so turning it off changes no batch.

    Hook DEVICE_DATASETS: ``tensorflow.python.data.ops.multi_device_iterator_ops._create_device_dataset``
    (TF 2.16-2.21), a module function that ``MultiDeviceIterator`` and ``OwnedMultiDeviceIterator``
    look up when they build their per-device iterators; wrapped once, the result gets the option.
    """
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops

    create = multi_device_iterator_ops._create_device_dataset
    if getattr(create, "_without_autotune", False):
        return

    @functools.wraps(create)
    def create_without_autotune(*args: Any, **kwargs: Any) -> Any:
        options = tf.data.Options()
        options.autotune.enabled = False
        return create(*args, **kwargs).with_options(options)

    create_without_autotune._without_autotune = True  # type: ignore[attr-defined]
    multi_device_iterator_ops._create_device_dataset = create_without_autotune


# --------------------------------------------------------------------------- multi-worker health

def bound_multi_worker_waits(cluster_wait_s: float, check_interval_s: float, peer_timeout_s: float,
                             retries: int) -> None:
    """Bound how long a ``MultiWorkerMirroredStrategy`` waits for its peers.

    Hook MULTI_WORKER_HEALTH: class attributes of
    ``tensorflow.python.distribute.collective_all_reduce_strategy.CollectiveAllReduceExtended``
    read when a strategy is built (``_start_check_health_thread``) and by its health thread
    (``_check_health``). TF's defaults wait forever for the cluster to form
    (``_check_health_initial_timeout = 0``) and notice a dead peer only after up to
    30 s + 3 x 10 s; no public API sets either. A dead or missing worker then aborts the
    collectives with ``UnavailableError`` (or ``RuntimeError`` on start-up) instead of a hang.
    Set before the strategy is built; applies to every strategy built afterwards.
    """
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    extended = cars.CollectiveAllReduceExtended
    for name in ("_enable_check_health", "_check_health_initial_timeout", "_check_health_interval",
                 "_check_health_timeout", "_check_health_retry_limit"):
        if not hasattr(extended, name):
            raise AttributeError(f"{MULTI_WORKER_HEALTH}: {name} is gone")
    extended._enable_check_health = True
    extended._check_health_initial_timeout = cluster_wait_s
    extended._check_health_interval = check_interval_s
    extended._check_health_timeout = peer_timeout_s
    extended._check_health_retry_limit = retries


# --------------------------------------------------------------------------- Kubeflow work-arounds
# Work-arounds for upstream TFX / KFP gaps on an open-source KFP 2.x cluster. Each names the
# upstream issue or source line it works around; tests/test_kubeflow_compat.py runs the
# upstream code path and asserts it still fails, so an upgrade that fixes upstream says
# which work-around to delete.

import json  # noqa: E402
from collections.abc import Mapping  # noqa: E402

# TFX's V2 container entrypoint; ours (pipeline/kubeflow/entrypoint.py) wraps it.
TFX_ENTRYPOINT_MODULE = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
INVOCATION_FLAG = "--json_serialized_invocation_args"
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


def _flag_value(argv: list[str], flag: str) -> int | None:
    """Index of the value of ``flag`` in ``argv`` (``--flag value`` or ``--flag=value``)."""
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return index + 1
        if arg.startswith(flag + "="):
            return index
    return None


def _get(argv: list[str], index: int, flag: str) -> str:
    value = argv[index]
    return value[len(flag) + 1:] if value.startswith(flag + "=") else value


def _set(argv: list[str], index: int, flag: str, value: str) -> None:
    argv[index] = f"{flag}={value}" if argv[index].startswith(flag + "=") else value


def restore_artifact_types(executor_input: dict[str, Any], inputs_spec: Mapping[str, Any]) -> list[str]:
    """Give upstream input artifacts back the type the compiled component declares.

    tensorflow/tfx#7768 (open for TFX 1.16 + KFP 2.x): KFP's driver passes an artifact produced
    by an upstream task with ``type: {instanceSchema: ""}`` (kubeflow/pipelines backend
    ``src/v2/metadata/client.go`` GetOutputArtifactsByExecutionId: ``Schema: "" // TODO``), and
    TFX's entrypoint (``kubeflow_v2_entrypoint_utils._retrieve_class_path``) then fails with
    ``AttributeError: 'NoneType' object has no attribute 'get'``. The compiled spec already
    carries each input's type in the component's inputDefinitions, which TFX passes to the
    container as ``--json_serialized_inputs_spec_args``; this copies it into the artifacts
    whose type is empty. Returns the input names it restored (in place).
    """
    declared = inputs_spec.get("artifacts", {})
    restored = []
    for name, artifact_list in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in artifact_list.get("artifacts", []):
            kind = artifact.get("type") or {}
            if kind.get("schemaTitle") or (kind.get("instanceSchema") or "").strip():
                continue
            if name not in declared:
                raise ValueError(
                    f"Input artifact {name!r} arrived without a type (KFP passes an empty instanceSchema for "
                    f"upstream artifacts, tensorflow/tfx#7768) and the compiled component declares no input "
                    f"of that name (it declares {sorted(declared)}): recompile the pipeline with this image's "
                    "version of the project.")
            artifact["type"] = dict(declared[name]["artifactType"])
            restored.append(name)
    return restored


def restore_artifact_types_in_argv(argv: list[str]) -> list[str]:
    """``restore_artifact_types`` applied to the container arguments; returns the new argv."""
    argv = list(argv)
    invocation_at = _flag_value(argv, INVOCATION_FLAG)
    spec_at = _flag_value(argv, INPUTS_SPEC_FLAG)
    if invocation_at is None or spec_at is None:
        return argv
    executor_input = json.loads(_get(argv, invocation_at, INVOCATION_FLAG))
    inputs_spec = json.loads(_get(argv, spec_at, INPUTS_SPEC_FLAG))
    if restore_artifact_types(executor_input, inputs_spec):
        _set(argv, invocation_at, INVOCATION_FLAG, json.dumps(executor_input))
    return argv


# Output names KFP's own launcher manages, never declared by a component (kubeflow/pipelines backend).
LAUNCHER_MANAGED_TYPE_PREFIX = "system."


def drop_launcher_managed_outputs(executor_input: dict[str, Any]) -> list[str]:
    """Remove from ``executor_input`` the outputs KFP's driver adds and its launcher fills itself.

    From backend 2.5.0 the driver adds an ``executor-logs`` output of type ``system.Artifact`` to
    every task when ``--publish_logs`` is ``"true"``, its default (kubeflow/pipelines
    backend/src/v2/driver/driver.go provisionOutputs, :2025-2038@2.5.0, :755-767@2.17.0;
    cmd/driver/main.go:85@2.5.0, :102@2.17.0; added by kubeflow/pipelines#11809). The launcher tees
    the container's stdout into that artifact's local path and uploads it itself
    (component/launcher_v2.go getLogWriter :632 and uploadOutputArtifacts :802@2.17.0, which
    ignores what the ExecutorOutput says of it), but it also leaves the output in ``{{$}}``, where TFX
    1.16's entrypoint looks up a class for every output type
    (``kubeflow_v2_entrypoint_utils._retrieve_class_path``) and fails with ``ImportError: Could not
    import system.Artifact``. A TFX component declares only TFX artifact types (``tfx.*`` titles
    or a class path), never KFP's ``system.*`` ones, so every output typed ``system.*`` is one the
    launcher manages. Returns the names removed (in place).
    """
    outputs = executor_input.get("outputs", {}).get("artifacts", {})
    dropped = []
    for name, artifact_list in list(outputs.items()):
        kinds = [artifact.get("type") or {} for artifact in artifact_list.get("artifacts", [])]
        titles = [kind.get("schemaTitle") or _instance_schema_title(kind.get("instanceSchema") or "")
                  for kind in kinds]
        if titles and all(title.startswith(LAUNCHER_MANAGED_TYPE_PREFIX) for title in titles):
            del outputs[name]
            dropped.append(name)
    return dropped


def _instance_schema_title(instance_schema: str) -> str:
    """The ``title:`` line of an instanceSchema YAML ("" without one)."""
    for line in instance_schema.splitlines():
        if line.startswith("title:"):
            return line.split(":", 1)[1].strip()
    return ""


def single_deletes_where_batch_is_denied() -> bool:
    """Make Beam's S3 filesystem delete key by key what a batch delete was denied.

    Beam renames (FinalizeWrite's temp files, every sharded write) as copy + ``DeleteObjects``
    (apache_beam/io/aws/clients/s3/boto3_client.py delete_batch). On multi-user KFP 2.15 and 2.16
    the bundled store is SeaweedFS 4.00 and a profile's keys may write only under its prefixes
    (pipelines-profile-controller/sync.py:353-373@2.15.0): SeaweedFS authorizes a single
    ``DeleteObject`` by its key but a ``POST ?delete`` by the bucket alone (seaweedfs 4.00
    weed/s3api/s3api_server.go:322, auth_credentials.go canDo :523-567), so every batch is denied
    and the step fails after its work. From SeaweedFS 4.34 (KFP 2.17) batches are authorized key by
    key (s3api_object_handlers_delete.go AuthorizeBatchDeleteKey). Keys denied in a batch, as an
    error for the whole request (403) or per key (AccessDenied), are deleted one by one, which the
    same keys may do. Returns False when Beam's S3 client is not installed.
    """
    try:
        from apache_beam.io.aws.clients.s3 import boto3_client, messages
    except ImportError:
        return False
    client_class = boto3_client.Client
    if getattr(client_class.delete_batch, "_single_deletes", False):
        return True
    batch = client_class.delete_batch

    def delete_batch(self: Any, request: Any) -> Any:
        try:
            response = batch(self, request)
        except messages.S3ClientError as refused:
            if refused.code not in (403, "AccessDenied"):
                raise
            response = messages.DeleteBatchResponse([], list(request.objects), [refused] * len(request.objects))
        denied = [key for key, why in zip(response.failed, response.errors) if why.code in (403, "AccessDenied")]
        if not denied:
            return response
        deleted, failed, errors = list(response.deleted), [], []
        for key, why in zip(response.failed, response.errors):
            if key not in denied:
                failed.append(key)
                errors.append(why)
                continue
            try:
                self.delete(messages.DeleteRequest(request.bucket, key))
                deleted.append(key)
            except messages.S3ClientError as single:
                failed.append(key)
                errors.append(single)
        return messages.DeleteBatchResponse(deleted, failed, errors)

    delete_batch._single_deletes = True  # type: ignore[attr-defined]
    delete_batch.__wrapped__ = batch  # type: ignore[attr-defined]
    client_class.delete_batch = delete_batch
    return True


def with_default_pipeline_root(pipeline_job: dict[str, Any], pipeline_root: str) -> dict[str, Any]:
    """The PipelineSpec to write, with the pipeline root recorded in it.

    TFX 1.16's ``KubeflowV2DagRunner`` keeps the root only in the PipelineJob's
    ``runtimeConfig.gcsOutputDirectory`` and drops ``runtimeConfig`` when it writes YAML
    (``kubeflow_v2_dag_runner._write_pipeline_spec_to_file`` dumps ``pipelineSpec`` alone), so
    a KFP run of the package falls back to ``minio://mlpipeline/v2/artifacts`` (backend
    ``src/v2/config/env.go`` defaultPipelineRoot), which TFX cannot write. The spec field
    ``defaultPipelineRoot`` is where kfp's own compiler records it; ``deploy`` reads it back
    and passes it as the run's ``runtime_config.pipeline_root`` (the KFP 2.3 API server reads
    only that: backend ``src/apiserver/template/template.go`` modelToPipelineJobRuntimeConfig).
    """
    spec = dict(pipeline_job["pipelineSpec"])
    spec["defaultPipelineRoot"] = pipeline_root
    return spec


def exit_skipping_teardown(code: int) -> None:
    """End a step's pod process with ``code`` once its outputs are written, without interpreter
    teardown: there tensorflow-io's S3 client aborts ("pure virtual method called", exit 134)
    and would fail a step that finished."""
    remove_autograph_sources()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


# --------------------------------------------------------------------------- tensorflow_hub

def import_tensorflow_hub() -> Any:
    """``tensorflow_hub``, importable under TF 2.16.

    Hook HUB_ESTIMATOR_STUB: tensorflow_hub 0.15 imports ``tf.compat.v1.estimator`` at package
    import (only for its Estimator exporter, unused here) and TF 2.16 no longer ships
    Estimator. A stub naming the two attributes hub's module body reads lets the package
    load; it is installed only when that import is missing. Drop with tensorflow_hub >= 0.16,
    which has no Estimator code.
    """
    import types

    try:
        import tensorflow_hub as hub
        return hub
    except ImportError as error:
        if "estimator" not in str(error):
            raise
    stub: Any = types.ModuleType("tensorflow.compat.v1.estimator")  # Any: attributes set below
    stub.Exporter = object
    stub.ModeKeys = types.SimpleNamespace(PREDICT="infer", TRAIN="train", EVAL="eval")
    sys.modules["tensorflow.compat.v1.estimator"] = stub
    for name in [n for n in sys.modules if n == "tensorflow_hub" or n.startswith("tensorflow_hub.")]:
        del sys.modules[name]  # the half-imported package
    import tensorflow_hub as hub
    return hub


# --------------------------------------------------------------------------- TFMA's config protos

#: The config protos TFMA's ``__all__`` lists at the top level (both stacks), as ``proto/config_pb2`` names them.
TFMA_CONFIG_PROTO_NAMES = (
    "AggregationOptions", "BinarizationOptions", "ConfidenceIntervalOptions", "CrossSliceMetricThreshold",
    "CrossSliceMetricThresholds", "CrossSlicingSpec", "EvalConfig", "ExampleWeightOptions",
    "GenericChangeThreshold", "GenericValueThreshold", "MetricConfig", "MetricsSpec", "MetricThreshold",
    "ModelSpec", "Options", "PaddingOptions", "PerSliceMetricThreshold", "PerSliceMetricThresholds",
    "RepeatedInt32Value", "RepeatedStringValue", "SlicingSpec",
)


def tfma_with_config_protos() -> Any:
    """``tensorflow_model_analysis``, with the config protos its ``__all__`` lists set where missing.

    Hook TFMA_CONFIG_PROTOS: TFMA 0.47 (tfx 1.16) imports them into the package from
    ``tensorflow_model_analysis.proto.config_pb2`` (``sdk.py``); TFMA 0.52 (tfx 1.21) still lists
    them in ``__init__.__all__`` but no longer imports them, so ``tfma.EvalConfig`` is an
    ``AttributeError`` there. The classes are taken from ``config_pb2``, the module that defines
    them on both; a name already present is left alone. Idempotent.
    """
    import tensorflow_model_analysis as tfma
    from tensorflow_model_analysis.proto import config_pb2

    for name in TFMA_CONFIG_PROTO_NAMES:
        if not hasattr(tfma, name) and hasattr(config_pb2, name):
            setattr(tfma, name, getattr(config_pb2, name))
    return tfma


# --------------------------------------------------------------------------- lazy base classes

_LAZY_CLASSES: dict[str, Callable[[], type]] = {
    "HookedNodeDoFn": _hooked_node_do_fn,
    "HookedBeamDagRunner": _hooked_beam_dag_runner,
    "AnomalyHookValidatorExecutor": _anomaly_hook_validator_executor,
    "CountRecords": _count_records_dofn,
}


def __getattr__(name: str) -> type:
    """Build a base class on first use, under this module's name so Beam can pickle it."""
    factory = _LAZY_CLASSES.get(name)
    if factory is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    cls = factory()
    cls.__module__, cls.__qualname__, cls.__name__ = __name__, name, name
    globals()[name] = cls
    return cls

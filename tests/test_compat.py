"""Each private TF/TFX/kfp hook in stackenv/compat.py still matches the installed libraries.

A failure here names the hook: an upgrade changed a private API the project relies on;
read the hook's docstring in stackenv/compat.py and the library's new source.
"""
import inspect
from types import SimpleNamespace

from stackenv import compat

import pytest


def _broken(hook: str, detail: str) -> str:
    return f"compat hook broken by an upgrade: {hook}: {detail} (see stackenv/compat.py)"


def test_autograph_rules_hook_skips_and_restores_tf_keras():
    import tf_keras
    from tensorflow.python.autograph.core import config
    from tensorflow.python.autograph.impl import conversion

    assert isinstance(getattr(config, "CONVERSION_RULES", None), tuple), _broken(
        compat.AUTOGRAPH_RULES, "config.CONVERSION_RULES is no longer a module-level tuple")
    before = config.CONVERSION_RULES
    try:
        compat.set_autograph_skip("tf_keras", skip=False)
        assert not compat.autograph_skips("tf_keras")
        compat.set_autograph_skip("tf_keras", skip=True)
        assert compat.autograph_skips("tf_keras"), _broken(compat.AUTOGRAPH_RULES, "DoNotConvert has no _prefix")
        assert config.CONVERSION_RULES[0]._prefix == "tf_keras"
        # Behaviour, not only shape: AutoGraph itself now treats tf_keras code as allowlisted.
        assert conversion.is_allowlisted(tf_keras.layers.Dense.call), _broken(
            compat.AUTOGRAPH_RULES, "conversion no longer reads config.CONVERSION_RULES")
    finally:
        config.CONVERSION_RULES = before


_CONVERT_THEN_EXIT = """
import json, os, sys, tempfile
tempfile.tempdir = sys.argv[1]
import stackenv
import tensorflow as tf
from stackenv import compat

@tf.function
def clipped(x):
    if tf.reduce_sum(x) > 0:  # Python control flow: AutoGraph converts it
        return x
    return -x

clipped(tf.constant([1.0]))
print(json.dumps(sorted(os.listdir(sys.argv[1]))), flush=True)
if sys.argv[2] == "hook":
    compat.exit_skipping_teardown(0)
os._exit(0)
"""


@pytest.mark.parametrize("exit_by", ["hook", "os._exit"])
def test_autograph_sources_are_removed_by_a_process_that_skips_teardown(tmp_path, exit_by):
    """A process ending with os._exit (every command; every pod step) skips the atexit handler that deletes
    AutoGraph's generated sources: through the hook they are removed, without it they stay (what it fixes)."""
    import json
    import subprocess
    import sys

    script, temp = tmp_path / "convert.py", tmp_path / "tmp"  # a file: AutoGraph reads the function's source
    script.write_text(_CONVERT_THEN_EXIT)
    temp.mkdir()
    result = subprocess.run([sys.executable, str(script), str(temp), exit_by], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    written = [name for name in json.loads(result.stdout.strip().splitlines()[-1])
               if name.startswith(compat.AUTOGRAPH_SOURCE_PREFIX)]
    assert written, _broken(compat.AUTOGRAPH_SOURCES, "AutoGraph wrote no __autograph_generated_file*.py")
    left = [name for name in written if (temp / name).exists()]
    if exit_by == "hook":
        assert not left, _broken(compat.AUTOGRAPH_SOURCES, f"{left} left: not found in sys.modules by file name")
    else:
        assert left == written


def test_beam_node_hook_wraps_tfx_run_node():
    from tfx.orchestration.beam import beam_dag_runner

    base = beam_dag_runner.PipelineNodeAsDoFn
    assert callable(getattr(base, "_run_node", None)), _broken(compat.BEAM_NODE_RUN, "no PipelineNodeAsDoFn._run_node")
    assert list(inspect.signature(base._run_node).parameters) == ["self"], _broken(
        compat.BEAM_NODE_RUN, "_run_node takes arguments now")
    init_source = inspect.getsource(base.__init__)
    for attribute in ("self._node_id", "self._pipeline_info", "self._mlmd_connection_config"):
        assert f"{attribute} =" in init_source, _broken(compat.BEAM_NODE_RUN, f"{attribute} is no longer set")
    assert beam_dag_runner.BeamDagRunner._PIPELINE_NODE_DO_FN_CLS is base, _broken(
        compat.BEAM_NODE_RUN, "BeamDagRunner._PIPELINE_NODE_DO_FN_CLS changed")
    assert "self._PIPELINE_NODE_DO_FN_CLS(" in inspect.getsource(beam_dag_runner.BeamDagRunner), _broken(
        compat.BEAM_NODE_RUN, "BeamDagRunner no longer builds nodes from _PIPELINE_NODE_DO_FN_CLS")

    seen = []

    class Recording(compat.HookedNodeDoFn):
        def run_node(self, node):
            seen.append((node.node_id, node.pipeline_id, node.mlmd_connection_config))
            node.run()

    ran = []
    do_fn = Recording.__new__(Recording)  # the attributes TFX's __init__ sets, without a real node
    do_fn._node_id, do_fn._pipeline_info = "Trainer", SimpleNamespace(id="p")
    do_fn._mlmd_connection_config = "mlmd"
    original = base._run_node
    try:
        base._run_node = lambda self: ran.append(self._node_id)
        do_fn._run_node()
    finally:
        base._run_node = original
    assert seen == [("Trainer", "p", "mlmd")] and ran == ["Trainer"]
    runner = compat.HookedBeamDagRunner(Recording)
    assert isinstance(runner, beam_dag_runner.BeamDagRunner), _broken(compat.BEAM_NODE_RUN, "got the legacy runner")
    assert runner._PIPELINE_NODE_DO_FN_CLS is Recording


def test_hooked_classes_pickle_by_reference():
    """Beam pickles node DoFns; the lazily built bases must resolve by module and name."""
    import pickle

    for name in ("HookedNodeDoFn", "HookedBeamDagRunner", "AnomalyHookValidatorExecutor"):
        cls = getattr(compat, name)
        assert pickle.loads(pickle.dumps(cls)) is cls


def test_validator_hook_sees_every_split(tmp_path):
    from tensorflow_metadata.proto.v0 import anomalies_pb2
    from tfx.components.example_validator import executor as validator_executor
    from tfx.components.example_validator import labels

    method = getattr(validator_executor.Executor, "_Validate", None)
    assert callable(method), _broken(compat.VALIDATOR_VALIDATE, "Executor._Validate is gone")
    assert list(inspect.signature(method).parameters) == ["self", "inputs", "outputs"], _broken(
        compat.VALIDATOR_VALIDATE, f"signature is now {inspect.signature(method)}")
    assert "self._Validate(" in inspect.getsource(validator_executor.Executor.Do), _broken(
        compat.VALIDATOR_VALIDATE, "Do no longer calls _Validate per split")
    assert hasattr(labels, "SCHEMA_DIFF_PATH"), _broken(compat.VALIDATOR_VALIDATE, "labels.SCHEMA_DIFF_PATH")

    found = anomalies_pb2.Anomalies()
    found.anomaly_info["label"].description = "new value"
    calls = []

    class Recording(compat.AnomalyHookValidatorExecutor):
        def on_split_validated(self, anomalies, split_dir):
            calls.append((anomalies, split_dir))

    original = validator_executor.Executor._Validate
    try:
        validator_executor.Executor._Validate = lambda self, inputs, outputs: found
        result = Recording()._Validate({}, {labels.SCHEMA_DIFF_PATH: str(tmp_path / "Split-eval")})
    finally:
        validator_executor.Executor._Validate = original
    assert result is found and calls == [(found, str(tmp_path / "Split-eval"))]


def test_pusher_hook_records_a_push_as_tfx_does():
    from tfx.components.pusher import executor as pusher_executor
    from tfx.types import standard_artifacts

    for name in ("_MarkPushed", "_MarkNotPushed", "_log_startup"):
        assert callable(getattr(pusher_executor.Executor, name, None)), _broken(compat.PUSHER_MARK, f"{name} is gone")
    executor = pusher_executor.Executor()
    compat.log_executor_startup(executor, {}, {}, {})
    pushed = standard_artifacts.PushedModel()
    compat.mark_pushed(executor, pushed, "/serving/cnn/7", "7")
    assert pushed.get_int_custom_property("pushed") == 1, _broken(compat.PUSHER_MARK, "'pushed' not set")
    assert pushed.get_string_custom_property("pushed_destination") == "/serving/cnn/7"
    assert pushed.get_string_custom_property("pushed_version") == "7"
    compat.mark_not_pushed(executor, pushed)
    assert pushed.get_int_custom_property("pushed") == 0


def test_executor_context_hook_reads_the_run_id():
    from tfx.components.pusher import executor as pusher_executor
    from tfx.dsl.components.base import base_executor

    assert "pipeline_run_id" in inspect.signature(base_executor.BaseExecutor.Context).parameters, _broken(
        compat.EXECUTOR_CONTEXT, "BaseExecutor.Context has no pipeline_run_id")
    executor = pusher_executor.Executor(base_executor.BaseExecutor.Context(pipeline_run_id="run-42"))
    assert compat.pipeline_run_id(executor) == "run-42", _broken(compat.EXECUTOR_CONTEXT, "_context moved")
    assert compat.pipeline_run_id(pusher_executor.Executor()) is None


def test_kfp_rest_client_hook_puts_timeouts_on_every_call():
    import kfp
    import urllib3

    # A namespace skips kfp.Client's start-up health check, so nothing is contacted.
    client = kfp.Client(host="http://127.0.0.1:9", namespace="compat-test")
    assert client._run_api.api_client is client._pipelines_api.api_client, _broken(
        compat.KFP_REST_CLIENT, "the client's APIs no longer share one api_client")
    assert compat.bound_kfp_client_io(client, 3.0, 7.0), _broken(compat.KFP_REST_CLIENT, "no rest_client layout")
    rest = client._pipelines_api.api_client.rest_client
    assert rest.pool_manager.connection_pool_kw["retries"].read == 0

    sent = []

    def refuse(method, url, **kwargs):
        sent.append(kwargs.get("timeout"))
        raise urllib3.exceptions.NewConnectionError(None, "refused by the test")

    rest.pool_manager.request = refuse
    with pytest.raises(Exception):  # noqa: B017 - any kfp error; what matters is what reached urllib3
        client.list_experiments()
    assert sent and isinstance(sent[0], urllib3.Timeout), _broken(
        compat.KFP_REST_CLIENT, "rest_client.request no longer receives _request_timeout")
    assert (sent[0].connect_timeout, sent[0].read_timeout) == (3.0, 7.0)
    assert not compat.bound_kfp_client_io(SimpleNamespace(), 1.0, 1.0)


def test_multi_worker_health_hook_sets_the_strategy_waits():
    from tensorflow.python.distribute import collective_all_reduce_strategy as cars

    extended = cars.CollectiveAllReduceExtended
    names = ("_enable_check_health", "_check_health_initial_timeout", "_check_health_interval",
             "_check_health_timeout", "_check_health_retry_limit")
    before = {name: getattr(extended, name, None) for name in names}
    assert None not in before.values(), _broken(compat.MULTI_WORKER_HEALTH, f"missing: {before}")
    # Behaviour, not only shape: the health thread still reads these attributes.
    source = inspect.getsource(extended._check_health) + inspect.getsource(extended._start_check_health_thread)
    for name in names[1:]:
        assert f"self.{name}" in source, _broken(compat.MULTI_WORKER_HEALTH, f"{name} no longer read")
    try:
        compat.bound_multi_worker_waits(7, 3, 2, 1)
        assert (extended._check_health_initial_timeout, extended._check_health_interval,
                extended._check_health_timeout, extended._check_health_retry_limit) == (7, 3, 2, 1)
    finally:
        for name, value in before.items():
            setattr(extended, name, value)



def test_device_datasets_hook_turns_autotuning_off_in_a_distributed_datasets_iterators(monkeypatch):
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops

    compat.device_datasets_without_autotune()
    hooked = multi_device_iterator_ops._create_device_dataset
    compat.device_datasets_without_autotune()  # a second call leaves the one wrapper
    assert multi_device_iterator_ops._create_device_dataset is hooked
    built = {"hooked": [], "tensorflow's": []}

    def spy(*args, **kwargs):
        built["hooked"].append(hooked(*args, **kwargs))
        built["tensorflow's"].append(hooked.__wrapped__(*args, **kwargs))
        return built["hooked"][-1]

    monkeypatch.setattr(multi_device_iterator_ops, "_create_device_dataset", spy)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    options = tf.data.Options()
    options.autotune.enabled = False  # as models/common/regime.py builds its datasets
    iterator = iter(strategy.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(2).with_options(options)))
    assert int(next(iterator)[0]) == 0
    assert built["hooked"], _broken(compat.DEVICE_DATASETS, "a distributed dataset's iterator no longer builds "
                                                            "its per-device datasets through _create_device_dataset")
    assert [ds.options().autotune.enabled for ds in built["hooked"]] == [False] * len(built["hooked"])
    # Why the hook exists: TensorFlow's own per-device datasets leave autotuning at its default, on, whatever
    # the input's options say (unset reads None).
    assert [ds.options().autotune.enabled for ds in built["tensorflow's"]] == [None] * len(built["hooked"]), _broken(
        compat.DEVICE_DATASETS, "the per-device datasets now take the input's options: the hook may go")

def test_tensorflow_hub_imports_and_loads_a_module_as_a_keras_layer(tmp_path):
    import tensorflow as tf

    hub = compat.import_tensorflow_hub()
    assert hasattr(hub, "KerasLayer") and hasattr(hub, "load"), _broken(compat.HUB_ESTIMATOR_STUB, dir(hub))
    module_dir = str(tmp_path / "extractor")
    tf.saved_model.save(tf.keras.Sequential([tf.keras.Input((4, 4, 3)), tf.keras.layers.GlobalAveragePooling2D()]),
                        module_dir)
    features = hub.KerasLayer(module_dir)(tf.ones([2, 4, 4, 3]))
    assert features.shape == (2, 3), _broken(compat.HUB_ESTIMATOR_STUB, features.shape)


def test_record_source_hook_counts_every_record_tfx_reads(tmp_path, monkeypatch):
    # StatisticsGen, Transform and the Evaluator read Examples through tfx_bsl's BeamSource.
    from stackenv import progress

    import apache_beam as beam
    import tensorflow as tf
    from tfx_bsl.public import tfxio

    path = str(tmp_path / "data.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(700):
            writer.write(tf.train.Example(features=tf.train.Features(feature={"x": tf.train.Feature(
                int64_list=tf.train.Int64List(value=[i]))})).SerializeToString())
    compat.count_records_read()
    compat.count_records_read()  # idempotent: counted once
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(tmp_path / "progress"))
    source = tfxio.TFExampleRecord(file_pattern=path)
    with beam.Pipeline() as pipeline:
        _ = pipeline | source.BeamSource() | beam.Map(lambda batch: batch.num_rows)
    progress.flush()
    counts, _ = progress.read(str(tmp_path / "progress"))
    assert counts.get(compat.RECORDS_READ) == 700, _broken(compat.RECORD_SOURCE, f"counted {counts}")


def test_tfxio_batching_hook_sets_byte_size_batching():
    from tfx_bsl.coders import batch_util

    assert "element_size_fn" not in batch_util.GetBatchElementsKwargs(None)
    with compat.byte_size_batching():
        kwargs = batch_util.GetBatchElementsKwargs(None)
    assert "element_size_fn" in kwargs and kwargs["max_batch_size"] > 1000, _broken(compat.TFXIO_BATCHING, kwargs)
    assert "element_size_fn" not in batch_util.GetBatchElementsKwargs(None)


def test_tfxio_batching_hook_caps_the_records_per_batch():
    """--eval-batch: a small record counts as 1/N of the byte target, so a batch holds at most N records."""
    from tfx_bsl.coders import batch_util

    with compat.byte_size_batching(256):
        kwargs = batch_util.GetBatchElementsKwargs(None)
    records = kwargs["max_batch_size"] // kwargs["element_size_fn"](b"a 100-byte text window")
    assert records == 256, _broken(compat.TFXIO_BATCHING, f"{records} records of 100 bytes per batch")
    after = batch_util.GetBatchElementsKwargs(None)
    assert "element_size_fn" not in after


@pytest.mark.parametrize("beam_args, local", [
    (["--direct_running_mode=in_memory"], True),
    (["--direct_running_mode=multi_processing", "--direct_num_workers=2"], True),
    (["--runner=DirectRunner"], True),
    (["--runner=PortableRunner", "--job_endpoint=embed", "--environment_type=EXTERNAL",
      "--environment_config=localhost:50000"], True),
    (["--runner=PortableRunner", "--job_endpoint=flink-jobserver:8099"], False),
    (["--runner=DataflowRunner", "--project=p", "--region=r"], False),
])
def test_tfx_sdist_skipped_only_where_workers_share_this_environment(beam_args, local):
    assert compat.workers_share_this_environment(beam_args) is local


def _noop_beam_executor() -> type:
    """A module-level Beam executor class (TFX names executors by their import path)."""
    from tfx.dsl.components.base import base_beam_executor

    class NoopBeamExecutor(base_beam_executor.BaseBeamExecutor):
        def Do(self, input_dict, output_dict, exec_properties):  # noqa: N802 (TFX's name)
            pass

    NoopBeamExecutor.__qualname__ = "NoopBeamExecutor"
    globals()["NoopBeamExecutor"] = NoopBeamExecutor
    return NoopBeamExecutor


def test_beam_executor_with_local_args_builds_no_tfx_sdist(monkeypatch):
    """The hook sits where TFX's BaseBeamExecutor calls it, and keeps TFX's path for remote runners."""
    from tfx.utils import dependency_utils

    NoopBeamExecutor = _noop_beam_executor()  # noqa: N806 (a class)
    built = []
    monkeypatch.setattr(dependency_utils, "build_ephemeral_package", lambda: built.append(1) or "/tmp/tfx.tar.gz")
    monkeypatch.setattr(dependency_utils, "make_beam_dependency_flags", dependency_utils.make_beam_dependency_flags)
    compat.skip_tfx_sdist_for_local_beam()
    compat.skip_tfx_sdist_for_local_beam()  # idempotent

    local = NoopBeamExecutor(NoopBeamExecutor.Context(beam_pipeline_args=["--direct_running_mode=in_memory"]))
    assert not built and not any("extra_package" in a for a in local._beam_pipeline_args), _broken(
        compat.BEAM_DEPENDENCY_FLAGS, f"a local executor packaged TFX: {local._beam_pipeline_args}")
    remote = NoopBeamExecutor(NoopBeamExecutor.Context(beam_pipeline_args=["--runner=DataflowRunner"]))
    assert built and "--extra_package=/tmp/tfx.tar.gz" in remote._beam_pipeline_args


def test_pipelines_given_no_runner_keep_to_the_fnapi_runner_without_trying_prism(monkeypatch):
    """The hook sits where ``beam.Pipeline`` reads its default runner and where the DirectRunner decides on
    Prism. PrismRunner is replaced by what it does on a machine without internet (it raises, having found no
    binary), recording that it was tried: Beam 2.77's DirectRunner tries it, 2.59's does not; with the hook
    neither does, the pipeline's result is the FnApiRunner's, the runner is of Beam's own class, and a
    ``--runner`` a user names still wins."""
    import stackenv

    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from apache_beam.runners.direct.direct_runner import DirectRunner
    from apache_beam.runners.portability import prism_runner
    from apache_beam.runners.portability.fn_api_runner.fn_runner import RunnerResult
    from tensorflow_transform.beam import impl as tft_impl

    tried = []

    def no_binary(self, pipeline, options):
        # As apache_beam/runners/portability/prism_runner.py:302@v2.77.0 without network ("Unable to fetch remote
        # prism binary"), which runners/direct/direct_runner.py:208-229@v2.77.0 catches to fall back.
        tried.append(pipeline)
        raise RuntimeError("Unable to fetch remote prism binary (no network)")

    monkeypatch.setattr(prism_runner.PrismRunner, "run_pipeline", no_binary)
    monkeypatch.setattr(StandardOptions, "DEFAULT_RUNNER", StandardOptions.DEFAULT_RUNNER)

    def run(*args: str):
        pipeline = beam.Pipeline(options=PipelineOptions(["--direct_running_mode=in_memory", *args]))
        _ = pipeline | beam.Create([1, 2, 3]) | beam.Map(lambda x: x * 2) | beam.combiners.Count.Globally()
        result = pipeline.run()
        result.wait_until_finish()
        return pipeline, result

    run()
    newer = stackenv.stack() == "tfx-1.21"
    assert bool(tried) == newer, f"Beam's DirectRunner {'no longer tries' if newer else 'now tries'} Prism first"
    tried.clear()
    compat.direct_runner_without_prism()
    compat.direct_runner_without_prism()  # idempotent
    pipeline, result = run()
    assert not tried, _broken(compat.DIRECT_RUNNER_PRISM, "a pipeline given no runner was handed to PrismRunner")
    assert isinstance(result, RunnerResult), _broken(compat.DIRECT_RUNNER_PRISM, f"result {type(result).__name__}")
    # Beam's own class, which TensorFlow Transform looks its session settings up by (a subclass got none).
    assert type(pipeline.runner) is DirectRunner, type(pipeline.runner)
    assert type(pipeline.runner) in tft_impl._DEFAULT_TENSORFLOW_CONFIG_BY_BEAM_RUNNER_TYPE
    pipeline, _ = run("--runner=BundleBasedDirectRunner")
    assert type(pipeline.runner).__name__ == "BundleBasedDirectRunner"


def test_transform_write_hook_puts_our_write_in_tfx_transform_and_restores_it():
    # The hook names the module global TFX's Transform Executor.Do instantiates; inside, its TFRecord write is
    # ours (building it calls ``write``), other formats stay TFX's, and the global is restored even on an error.
    import apache_beam as beam
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tfx.components.transform import executor, labels

    tfx_processor, asked = executor.TransformProcessor, []

    def write(path):
        asked.append(path)
        return beam.Map(lambda record: record)

    with pytest.raises(RuntimeError, match="inside"), compat.transform_writes_with(write):
        processor = executor.TransformProcessor()
        assert isinstance(processor, tfx_processor), compat.TRANSFORM_WRITE
        schema = schema_pb2.Schema()
        with beam.Pipeline() as pipeline:  # built, not run: nothing to write
            records = pipeline | beam.Create([])
            _ = records | "Ours" >> processor._EncodeAndWrite(schema, labels.FORMAT_TFRECORD, "/out/prefix")
            assert asked == ["/out/prefix"], compat.TRANSFORM_WRITE
            _ = records | "Theirs" >> processor._EncodeAndWrite(schema, executor._FILE_FORMAT_PARQUET, "/out/other")
            assert asked == ["/out/prefix"], compat.TRANSFORM_WRITE
            raise RuntimeError("inside")
    assert executor.TransformProcessor is tfx_processor


def test_tfma_config_protos_hook_gives_the_names_tfma_lists_on_this_stack():
    """TFMA 0.47 imports its config protos into the package; 0.52 lists them in __all__ but does not."""
    from stackenv.tfma import tfma

    import tensorflow_model_analysis
    from tensorflow_model_analysis.proto import config_pb2

    assert tfma is tensorflow_model_analysis
    listed = getattr(tensorflow_model_analysis, "__all__", None)  # 0.52 has one, 0.47 none
    if listed is not None:
        promised = {name for name in listed if hasattr(config_pb2, name)}
        assert promised == set(compat.TFMA_CONFIG_PROTO_NAMES), _broken(
            compat.TFMA_CONFIG_PROTOS,
            f"TFMA's __all__ now lists {sorted(promised ^ set(compat.TFMA_CONFIG_PROTO_NAMES))}")
    for name in ("EvalConfig", "MetricConfig", "MetricsSpec", "ModelSpec", "SlicingSpec", "MetricThreshold",
                 "GenericValueThreshold", "GenericChangeThreshold", "PerSliceMetricThreshold", "Options",
                 "BinarizationOptions"):  # the ones the project uses
        assert getattr(tfma, name) is getattr(config_pb2, name), _broken(compat.TFMA_CONFIG_PROTOS, name)
    config = tfma.EvalConfig(model_specs=[tfma.ModelSpec(label_key="label")],
                             metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name="ExampleCount")])])
    assert config.metrics_specs[0].metrics[0].class_name == "ExampleCount"


def test_tfma_signature_call_hook_passes_serialized_examples_by_name(tmp_path, monkeypatch):
    import tensorflow as tf
    from tensorflow.python.framework import ops
    from tensorflow_model_analysis.utils import model_util

    source = inspect.getsource(model_util.ModelSignaturesDoFn._batch_reducible_process)
    assert "get_callable(" in source and "signature(tf.constant(inputs, dtype=tf.string))" in source, _broken(
        compat.TFMA_SIGNATURE_CALL, "TFMA no longer calls get_callable's signature positionally with the examples")

    class Served(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"length": tf.strings.length(examples)}

    served = Served()
    tf.saved_model.save(served, str(tmp_path), signatures={"serving_default": served.serve})
    model = tf.saved_model.load(str(tmp_path))
    batch = tf.constant([b"x" * n for n in range(1, 41)])
    formatted = []
    tensor_repr = ops._EagerTensorBase.__repr__
    monkeypatch.setattr(ops._EagerTensorBase, "__repr__", lambda self: formatted.append(1) or tensor_repr(self))

    # Without the hook: TFMA's positional call formats the whole batch before it runs (why the hook exists).
    assert model_util.get_callable(model, "serving_default")(batch)["length"].numpy().tolist() == list(range(1, 41))
    assert formatted, _broken(compat.TFMA_SIGNATURE_CALL, "a positional call no longer formats its inputs: "
                              "the hook may go")
    formatted.clear()
    tfma_get_callable = model_util.get_callable
    with compat.tfma_calls_signatures_by_name():
        signature = model_util.get_callable(model, "serving_default")
        outputs = signature(batch)
        assert signature.structured_input_signature == model.signatures["serving_default"].structured_input_signature
        assert signature(examples=batch)["length"].numpy().tolist() == list(range(1, 41))
    assert outputs["length"].numpy().tolist() == list(range(1, 41))
    assert not formatted
    assert model_util.get_callable is tfma_get_callable

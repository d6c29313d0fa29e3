"""Each Kubeflow work-around is still needed (upstream still fails) and still works (ours passes).

When an upgrade fixes upstream, the ``*_upstream_still_fails`` test fails: delete the
work-around it names in stackenv/compat.py (or components/evaluator.py).
The scenarios are those of the issue's reproduction scripts (tensorflow/tfx#7768; the
blessing refactor with an in-process baseline).
"""
import json

from stackenv.compat import (
    INPUTS_SPEC_FLAG,
    INVOCATION_FLAG,
    drop_launcher_managed_outputs,
    restore_artifact_types,
    restore_artifact_types_in_argv,
    with_default_pipeline_root,
)

import pytest
import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2 as pb
from tfx.components import ImportExampleGen
from tfx.components.evaluator import constants
from tfx.orchestration import pipeline as tfx_pipeline
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_entrypoint_utils as entrypoint_utils
from tfx.types import standard_artifacts

from components.evaluator import BASELINE_MODEL_URI_KEY, _name_baseline_by_path

EXAMPLES_SCHEMA = "title: tfx.Examples\ntype: object\n"
# As KFP's driver passes an artifact produced upstream (backend src/v2/metadata/client.go:825).
EXECUTOR_INPUT = {"inputs": {"artifacts": {"examples": {"artifacts": [{
    "name": "42", "uri": "gs://b/root/cnn-pipeline/run/ImportExampleGen/examples",
    "type": {"instanceSchema": ""},
    "metadata": {"split_names": "[\"train\", \"eval\"]", "span": 0.0}}]}}}}
INPUTS_SPEC = {"artifacts": {"examples": {"artifactType": {"instanceSchema": EXAMPLES_SCHEMA}}}}


def _parse(executor_input: dict):
    message = json_format.Parse(json.dumps(executor_input), pb.ExecutorInput(), ignore_unknown_fields=True)
    return entrypoint_utils.parse_raw_artifact_dict(message.inputs.artifacts)


def test_empty_instance_schema_upstream_still_fails():
    """tensorflow/tfx#7768: if this fails, TFX parses empty schemas; drop restore_artifact_types."""
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'get'"):
        _parse(EXECUTOR_INPUT)


# As KFP 2.5+'s driver provisions every task's outputs (backend src/v2/driver/driver.go:755-788@2.17.0).
OUTPUTS_2_17 = {"outputs": {"artifacts": {
    "examples": {"artifacts": [{"name": "examples", "uri": "minio://mlpipeline/v2/p/r/ImportExampleGen/u/examples",
                                "type": {"instanceSchema": EXAMPLES_SCHEMA}}]},
    "executor-logs": {"artifacts": [{"name": "executor-logs", "type": {"schemaTitle": "system.Artifact"},
                                     "uri": "minio://mlpipeline/v2/p/r/ImportExampleGen/u/executor-logs-0"}]}}}}


def _parse_outputs(executor_input: dict):
    message = json_format.Parse(json.dumps(executor_input), pb.ExecutorInput(), ignore_unknown_fields=True)
    return entrypoint_utils.parse_raw_artifact_dict(message.outputs.artifacts)


def test_executor_logs_output_upstream_still_fails():
    """KFP 2.5+ (kubeflow/pipelines#11809): if this fails, TFX imports system.Artifact; drop
    drop_launcher_managed_outputs."""
    with pytest.raises(ImportError, match="system.Artifact"):
        _parse_outputs(OUTPUTS_2_17)


def test_launcher_managed_outputs_dropped_parse():
    executor_input = json.loads(json.dumps(OUTPUTS_2_17))
    assert drop_launcher_managed_outputs(executor_input) == ["executor-logs"]
    [examples] = _parse_outputs(executor_input)["examples"]
    assert isinstance(examples, standard_artifacts.Examples)


def test_restored_artifact_types_parse():
    executor_input = json.loads(json.dumps(EXECUTOR_INPUT))
    assert restore_artifact_types(executor_input, INPUTS_SPEC) == ["examples"]
    [examples] = _parse(executor_input)["examples"]
    assert isinstance(examples, standard_artifacts.Examples)
    assert json.loads(examples.split_names) == ["train", "eval"]
    assert examples.uri.endswith("/ImportExampleGen/examples")


def test_restore_in_argv_keeps_every_other_argument():
    argv = ["--executor_class_path", "x.Executor", INVOCATION_FLAG, json.dumps(EXECUTOR_INPUT),
            f"{INPUTS_SPEC_FLAG}={json.dumps(INPUTS_SPEC)}", "--direct_running_mode=in_memory"]
    fixed = restore_artifact_types_in_argv(argv)
    assert fixed[:3] == argv[:3] and fixed[4:] == argv[4:]
    artifact = json.loads(fixed[3])["inputs"]["artifacts"]["examples"]["artifacts"][0]
    assert artifact["type"] == {"instanceSchema": EXAMPLES_SCHEMA}
    assert restore_artifact_types_in_argv(["--executor_class_path", "x"]) == ["--executor_class_path", "x"]


def test_an_untyped_input_the_spec_does_not_declare_is_a_paragraph():
    with pytest.raises(ValueError, match="recompile the pipeline"):
        restore_artifact_types(json.loads(json.dumps(EXECUTOR_INPUT)), {"artifacts": {}})


def _blessing_with_in_process_baseline():
    name_from_id = {}
    model_pb = pb.RuntimeArtifact(name="123", uri="gs://b/r/Trainer/model",
                                  type=pb.ArtifactTypeSchema(instance_schema="title: tfx.Model\ntype: object\n"))
    [model] = entrypoint_utils.parse_raw_artifact_dict(
        {"model": pb.ArtifactList(artifacts=[model_pb])}, name_from_id)["model"]
    baseline = standard_artifacts.Model()  # as the served-model Evaluator builds it: id 0
    blessing = standard_artifacts.ModelBlessing()
    blessing.set_string_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, "/tmp/served-baseline-x")
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, model.id)
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline.id)
    return blessing, name_from_id


def test_blessing_with_in_process_baseline_upstream_still_fails():
    """TFX's refactor_model_blessing resolves every id it finds; an in-process artifact has none."""
    blessing, name_from_id = _blessing_with_in_process_baseline()
    with pytest.raises(KeyError):
        entrypoint_utils.refactor_model_blessing(blessing, name_from_id)


def test_blessing_names_the_served_baseline_by_path():
    blessing, name_from_id = _blessing_with_in_process_baseline()
    _name_baseline_by_path(blessing, "gs://b/serving/cnn/17")
    entrypoint_utils.refactor_model_blessing(blessing, name_from_id)
    assert blessing.get_string_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY) == "123"
    assert blessing.get_string_custom_property(BASELINE_MODEL_URI_KEY) == "gs://b/serving/cnn/17"
    assert not blessing.has_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY)
    # TFX's own baseline path points at the served version, not the step's temporary copy.
    assert blessing.get_string_custom_property(
        constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY) == "gs://b/serving/cnn/17"


def _tiny_pipeline(root: str):
    return tfx_pipeline.Pipeline(pipeline_name="tiny", pipeline_root=root,
                                 components=[ImportExampleGen(input_base="gs://b/data")])


def test_tfx_yaml_drops_the_pipeline_root_upstream_still(tmp_path):
    """If TFX's YAML keeps the root one day, with_default_pipeline_root can go."""
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image="img", use_pipeline_spec_2_1=True),
        output_dir=str(tmp_path), output_filename="tiny.yaml")
    job = runner.run(_tiny_pipeline("gs://b/root"), write_out=True)
    assert job["runtimeConfig"]["gcsOutputDirectory"] == "gs://b/root"
    written = (tmp_path / "tiny.yaml").read_text()
    assert "gs://b/root" not in written and "defaultPipelineRoot" not in written
    assert with_default_pipeline_root(job, "gs://b/root/tfx")["defaultPipelineRoot"] == "gs://b/root/tfx"
    assert yaml.safe_load(written)["pipelineInfo"]["name"] == "tiny"


def _beam_s3(address: str, keys: dict):
    from apache_beam.io.aws.s3filesystem import S3FileSystem
    from apache_beam.options.pipeline_options import PipelineOptions

    return S3FileSystem(PipelineOptions([f"--s3_endpoint_url=http://{address}", "--s3_region_name=us-east-1",
                                         f"--s3_access_key_id={keys['accesskey']}",
                                         f"--s3_secret_access_key={keys['secretkey']}"]))


def test_beam_batch_deletes_on_profile_keys_upstream_still_fail_and_single_deletes_work(monkeypatch):
    """KFP 2.15/2.16 multi-user (SeaweedFS 4.00 authorizes POST ?delete by the bucket alone): Beam's rename
    (copy + DeleteObjects, FinalizeWrite's) is denied; with the work-around the same keys go one by one."""
    from stackenv.compat import single_deletes_where_batch_is_denied

    from apache_beam.io.aws.clients.s3 import boto3_client
    from apache_beam.io.filesystem import BeamIOError
    from support.s3_server import keys as listed
    from support.s3_server import policed_s3_server

    prefix = "s3://mlpipeline/private-artifacts/team-a"
    with policed_s3_server("mlpipeline", {"team-a": ["private-artifacts/team-a/"]}, batch_deletes=False) as (
            address, keys):
        single_deletes_where_batch_is_denied()
        patched = boto3_client.Client.delete_batch
        monkeypatch.setattr(boto3_client.Client, "delete_batch", patched.__wrapped__)  # Beam as shipped
        filesystem = _beam_s3(address, keys["team-a"])
        with filesystem.create(f"{prefix}/tmp/a") as handle:
            handle.write(b"x")
        with pytest.raises(BeamIOError, match="AccessDenied|Access Denied"):
            filesystem.rename([f"{prefix}/tmp/a"], [f"{prefix}/out/a"])
        monkeypatch.setattr(boto3_client.Client, "delete_batch", patched)
        filesystem.rename([f"{prefix}/tmp/a"], [f"{prefix}/out/a"])
        assert listed(address, "mlpipeline", "private-artifacts/team-a/") == ["private-artifacts/team-a/out/a"]
        with pytest.raises(BeamIOError):  # outside the profile's prefixes a single delete is denied too
            _beam_s3(address, keys["team-a"]).delete(["s3://mlpipeline/elsewhere/x"])

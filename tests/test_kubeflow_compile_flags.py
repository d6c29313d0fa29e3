"""Compile flags no other test reads back (issue 36): each is found where the step that uses it reads
it in the compiled package: --schema (the pinned schema the validator checks against), --xla (the
Trainer's jit_compile), --gpu-type with --trainer-gpus, --memory-request, and --tune-job-timeout (the
Tuner's training job)."""
import json

import yaml
from conftest import run_cli
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

SCHEMA = "gs://my-bucket/schema/cnn-pipeline/schema-0123456789ab.pbtxt"


def test_flags_reach_the_steps_that_read_them(tmp_path):
    package = tmp_path / "cnn.yaml"
    result = run_cli("compile", "--image", "registry.example.com/tfx-project:test", "--pipeline-root",
                     "gs://my-bucket/tfx", "--output", package, "--schema", SCHEMA, "--xla", "--trainer-gpus", "1",
                     "--gpu-type", "amd.com/gpu", "--memory-request", "2Gi", "--tune-trials", "2",
                     "--tune-workers", "2", "--tune-job-timeout", "600")
    assert result.returncode == 0, result.stderr[-3000:]
    (spec,) = yaml.safe_load_all(package.read_text())
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    tasks = spec["root"]["dag"]["tasks"]
    params = {name: {k: v["runtimeValue"]["constant"] for k, v in task.get("inputs", {}).get("parameters", {}).items()
                     if "runtimeValue" in v} for name, task in tasks.items()}
    # --schema: imported by PinnedSchema, and the ExampleValidator checks the data against that one.
    assert params["PinnedSchema"]["schema_file"] == SCHEMA
    validator_schema = tasks["ExampleValidator"]["inputs"]["artifacts"]["schema"]["taskOutputArtifact"]
    assert validator_schema["producerTask"] == "PinnedSchema"
    # --xla: the Trainer's training settings (models/common/training.py compiles with jit_compile).
    assert json.loads(params["Trainer"]["custom_config"])["training"]["jit_compile"] is True
    # --tune-job-timeout: the Tuner's TFJob of --tune-workers trial runners gives up after it.
    assert json.loads(params["Tuner"]["custom_config"])["tfjob"]["timeout_seconds"] == 600
    executors = spec["deploymentSpec"]["executors"]

    def resources(task):
        return executors[spec["components"][task]["executorLabel"]]["container"]["resources"]

    # Kubernetes quantities as KFP stores them: gigabytes (2Gi = 2 * 2^30 bytes).
    two_gi = 2 * 2**30 / 1e9
    assert resources("Trainer") == {"accelerator": {"type": "amd.com/gpu", "count": 1}, "memoryRequest": two_gi}
    assert resources("StatisticsGen") == {"memoryRequest": two_gi}

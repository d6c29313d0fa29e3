"""Kubeflow: the compiled KFP v2 spec is the local graph, and its container steps really run.

No cluster here: the spec is parsed with kfp's own PipelineSpec proto and loader, and
every step runs through the very entrypoint the container would run (tests/kfp_emulator.py).
"""
import json
import os

import pytest
import tensorflow as tf
import yaml
from google.protobuf import json_format
from kfp import components as kfp_components
from kfp.pipeline_spec import pipeline_spec_pb2

from conftest import run_cli
from kfp_emulator import run_pipeline, topological_tasks
from pipeline.config import PipelineConfig
from pipeline.families import FAMILIES
from pipeline.graph import create_pipeline
from pipeline.kubeflow_runner import IMAGE_DATA_ROOT, dataset_for_cluster

IMAGE = "registry.example.com/tfx-project:test"
ENTRYPOINT = ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]


def _compile(tmp_path, model, *extra):
    package = tmp_path / f"{model}.yaml"
    result = run_cli("compile", "--model", model, "--image", IMAGE, "--pipeline-root", tmp_path / "root",
                     "--output", package, *extra)
    assert result.returncode == 0, result.stderr[-4000:]
    with open(package) as handle:
        return yaml.safe_load(handle)


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def compiled(request, tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp(f"kfp-{request.param}")
    return request.param, tmp_path, _compile(tmp_path, request.param, "--train-steps", "20",
                                             "--min-accuracy", "0.0", "--gate-margin", "-1")


def test_spec_parses_with_kfp(compiled):
    model, tmp_path, spec = compiled
    proto = json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())
    assert proto.schema_version == "2.1.0"  # parameterValues, which OSS KFP v2 fills
    assert proto.pipeline_info.name == f"{model}-pipeline"
    component = kfp_components.load_component_from_file(str(tmp_path / f"{model}.yaml"))
    assert component.name == f"{model}-pipeline"


def test_dag_equals_the_local_graph(compiled):
    model, tmp_path, spec = compiled
    config = PipelineConfig(model=model, output_dir=str(tmp_path / "root"))
    local = create_pipeline(config, dataset_for_cluster(config, FAMILIES[model].prepare_data))
    local_edges = {c.id: {u.id for u in c.upstream_nodes} for c in local.components}
    tasks = spec["root"]["dag"]["tasks"]
    assert {t: set(body.get("dependentTasks", [])) for t, body in tasks.items()} == local_edges


def test_every_executor_runs_the_image_entrypoint(compiled):
    _, _, spec = compiled
    executors = spec["deploymentSpec"]["executors"]
    assert len(executors) == len(spec["root"]["dag"]["tasks"])
    for name, executor in executors.items():
        container = executor["container"]
        assert container["image"] == IMAGE, name
        assert container["command"] == ENTRYPOINT, name
        args = container["args"]
        assert args[args.index("--executor_class_path") + 1], name
        assert args[args.index("--json_serialized_invocation_args") + 1] == "{{$}}", name
        assert "--direct_running_mode=in_memory" in args, name
    assert "components.evaluator.Executor" in json.dumps(executors)  # served-model baseline, no Resolver
    assert "resolver" not in json.dumps(spec).lower()


def test_parameters_are_compiled_in(compiled):
    model, tmp_path, spec = compiled
    tasks = spec["root"]["dag"]["tasks"]
    params = {t: {k: v["runtimeValue"]["constant"] for k, v in body.get("inputs", {}).get("parameters", {}).items()}
              for t, body in tasks.items()}
    assert params["ImportExampleGen"]["input_base"].startswith(IMAGE_DATA_ROOT + "/")
    trainer_config = json.loads(params["Trainer"]["custom_config"])
    assert trainer_config["code_version"] == FAMILIES[model].code_version()
    assert json.loads(params["Trainer"]["train_args"])["num_steps"] == 20
    serving = str(tmp_path / "root" / "serving" / model)
    assert params["Evaluator"]["baseline_serving_dir"] == serving
    assert json.loads(params["Pusher"]["push_destination"])["filesystem"]["base_directory"] == serving
    assert params["Transform"]["preprocessing_fn"] == FAMILIES[model].preprocessing_fn
    assert params["Trainer"]["run_fn"] == FAMILIES[model].run_fn


# The CNN runs every step (~2 min); seq2seq the data steps, to keep CI time in check.
RUN_UNTIL = {"cnn": None, "seq2seq": "SchemaGen"}


def test_compiled_steps_run_through_the_container_entrypoint(compiled, tmp_path):
    """Steps in DAG order, as the KFP backend would invoke them; image paths made local."""
    model, compile_dir, spec = compiled
    config = PipelineConfig(model=model, output_dir=str(tmp_path / "local"))
    local_dataset = FAMILIES[model].prepare_data(config)  # what the image bakes in at IMAGE_DATA_ROOT
    produced = run_pipeline(spec, str(tmp_path / "tasks"), until=RUN_UNTIL[model],
                            substitutions={IMAGE_DATA_ROOT: os.path.dirname(local_dataset.examples_dir)})
    splits = json.loads(produced["ImportExampleGen"]["examples"]["metadata"]["split_names"])
    assert sorted(splits) == ["eval", "train"]
    schema = os.path.join(produced["SchemaGen"]["schema"]["uri"], "schema.pbtxt")
    assert tf.io.gfile.exists(schema)
    if RUN_UNTIL[model]:
        return
    assert list(produced) == topological_tasks(spec)
    assert tf.io.gfile.exists(os.path.join(produced["Trainer"]["model"]["uri"], "Format-Serving", "saved_model.pb"))
    assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1
    serving = str(compile_dir / "root" / "serving" / model)
    versions = os.listdir(serving)
    assert len(versions) == 1 and tf.io.gfile.exists(os.path.join(serving, versions[0], "saved_model.pb"))


def test_compile_rejects_unprepared_data(tmp_path):
    result = run_cli("compile", "--image", IMAGE, "--pipeline-root", tmp_path / "root", "--data", tmp_path)
    assert result.returncode == 2
    assert "not a prepared dataset" in result.stderr and "python -m pipeline prepare" in result.stderr

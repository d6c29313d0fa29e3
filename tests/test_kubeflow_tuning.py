"""The Tuner on Kubeflow: compiled into the KFP v2 spec like any other step (cheap), and run
through the container entrypoint by the emulated KFP 2.x backend (tests/support/kfp_contract.py; slow)."""
import json
import os

import pytest
import yaml
from support.kfp_contract import Cluster, topological_tasks

from pipeline.config import PipelineConfig
from pipeline.families import FAMILIES
from pipeline.kubeflow.compile import IMAGE_DATA_ROOT, compile_pipeline, dataset_for_cluster

IMAGE = "registry.example.com/tfx-project:test"


def _compile(tmp_path):
    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "root"), train_steps=10, min_accuracy=0.0,
                            max_regression=1.0, gate_margin=-1.0, tune_trials=2, tune_steps=5)
    dataset = dataset_for_cluster(config, FAMILIES["cnn"].prepare_data)
    package = compile_pipeline(config, dataset, IMAGE, str(tmp_path / "cnn.yaml"))
    with open(package) as handle:
        return yaml.safe_load(handle), config


def test_tuner_compiles_into_the_spec_and_feeds_the_trainer(tmp_path):
    spec, _ = _compile(tmp_path)
    tasks = spec["root"]["dag"]["tasks"]
    assert "Tuner" in tasks and "Tuner" in tasks["Trainer"]["dependentTasks"]
    trainer_input = tasks["Trainer"]["inputs"]["artifacts"]["hyperparameters"]["taskOutputArtifact"]
    assert trainer_input == {"outputArtifactKey": "best_hyperparameters", "producerTask": "Tuner"}
    executor = spec["deploymentSpec"]["executors"]["Tuner_executor"]["container"]
    assert executor["command"][:3] == ["python", "-m", "pipeline.kubeflow.entrypoint"]
    assert executor["args"][:2] == ["--executor_class_path", "components.tuner.Executor"]
    parameters = spec["components"][tasks["Tuner"]["componentRef"]["name"]]["inputDefinitions"]["parameters"]
    assert "tuner_fn" in parameters and "custom_config" in parameters


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_tuner_runs_through_the_container_entrypoint(tmp_path):
    spec, config = _compile(tmp_path)
    local = FAMILIES["cnn"].prepare_data(PipelineConfig(model="cnn", output_dir=str(tmp_path / "image")))
    cluster = Cluster(str(tmp_path), allow_local_root=True,
                      image_paths={IMAGE_DATA_ROOT: os.path.dirname(local.examples_dir)})
    produced = cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"])
    assert list(produced) == topological_tasks(spec)
    best_dir = produced["Tuner"]["best_hyperparameters"]["uri"]
    best = json.loads(open(os.path.join(best_dir, "best_hyperparameters.txt")).read())["values"]
    model_dir = produced["Trainer"]["model"]["uri"]
    training = json.loads(open(os.path.join(model_dir, "Format-Serving", "assets.extra", "training.json")).read())
    assert training["tuned"] == best
    search = json.loads(open(os.path.join(produced["Tuner"]["tuner_results"]["uri"], "search.json")).read())
    assert search["trials_completed"] == 2

"""Every compiled step of both families, twice, passed exactly what a KFP 2.x backend passes.

The backend is emulated from its source (tests/support/kfp_contract.py cites the files): upstream
artifacts arrive with an empty ``instanceSchema`` and their MLMD id as name, outputs get
URIs under ``<root>/<pipeline>/<run>/<task>/<key>``. The second run finds the first run's
model served, so the Evaluator's served-model baseline path runs and the blessing goes
through TFX's ``refactor_model_blessing``.
"""
import json
import os
from pydoc_data.topics import topics

import pytest
import tensorflow as tf
import yaml
from support.kfp_contract import Cluster, TaskFailed, topological_tasks

from artifacts.serving_dir import list_versions
from pipeline.config import PipelineConfig
from pipeline.families import FAMILIES
from pipeline.kubeflow.compile import IMAGE_DATA_ROOT, compile_pipeline, dataset_for_cluster
from pipeline.kubeflow.fresh_data import override_caching

# Two full runs of every step, each step a fresh process: far over the suite's default timeout
# on a busy 2-core machine.
pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

IMAGE = "registry.example.com/tfx-project:test"
# Small and quick: the contract is what is tested, not the model.
# gate_margin -1: a 20-step model need not beat the reference predictors to exercise the contract.
SETTINGS = {"cnn": dict(train_steps=20, min_accuracy=0.0, max_regression=1.0, gate_margin=-1.0),
            "seq2seq": dict(train_steps=10, family_settings={"vocab_size": 300}, min_accuracy=0.0,
                            max_regression=1.0, gate_margin=-1.0)}


def _small_corpus(directory) -> str:
    """Eight documents of ~600 words: enough for a document split, small enough to be quick."""
    os.makedirs(directory, exist_ok=True)
    for name in sorted(topics, key=lambda t: -len(topics[t]))[:8]:
        with open(os.path.join(directory, f"{name}.txt"), "w", encoding="utf-8") as handle:
            handle.write(" ".join(topics[name].split()[:600]))
    return str(directory)


def compile_for_contract(model: str, tmp_path, root: str = None, cache: bool = False, **settings) -> tuple:
    """Compile through the project's compiler (default: a local root); returns (spec, config, image_paths).

    cnn reads the bundled digits inside its ExampleGen step; seq2seq a corpus folder passed as
    --data, as a user of their own data would (both read by the step, nothing at compile time).
    ``cache`` False: every step runs in every run, as after ``deploy --cache off``.
    """
    root = root or str(tmp_path / "root")
    image_paths = {}
    data = settings.pop("data", None)
    if model == "seq2seq" and data is None:
        data = _small_corpus(tmp_path / "corpus")  # read by the pipeline's own ExampleGen, as a bucket would be
    config = PipelineConfig(model=model, output_dir=root, data=data, **{**SETTINGS[model], **settings})
    dataset = dataset_for_cluster(config, FAMILIES[model].prepare_data)
    if data is None and dataset is not None:  # --ingest prepare: the bundled data baked into the image
        local = FAMILIES[model].prepare_data(PipelineConfig(model=model, output_dir=str(tmp_path / "image")))
        image_paths = {IMAGE_DATA_ROOT: os.path.dirname(local.examples_dir)}
    package = compile_pipeline(config, dataset, IMAGE, str(tmp_path / f"{model}.yaml"))
    with open(package) as handle:
        spec = yaml.safe_load(handle)
    return (spec if cache else override_caching(spec, False)), config, image_paths


# Both families, two runs each; the seq2seq half is behind `slow` to keep CI within its budget.
@pytest.fixture(scope="module", params=["cnn", pytest.param("seq2seq", marks=pytest.mark.slow)])
def two_runs(request, tmp_path_factory):
    model = request.param
    tmp_path = tmp_path_factory.mktemp(f"kfp-contract-{model}")
    spec, config, image_paths = compile_for_contract(model, tmp_path)
    cluster = Cluster(str(tmp_path), allow_local_root=True, image_paths=image_paths)
    root = spec["defaultPipelineRoot"]  # what `deploy` passes as the run's pipeline root
    runs, inputs, versions = [], [], []
    for run_id in ("run-1", "run-2"):
        runs.append(cluster.run(spec, run_id=run_id, runtime_root=root))
        inputs.append(cluster.executor_inputs)
        versions.append(list_versions(config.serving_model_dir))
    return model, spec, config, runs, inputs, versions


def test_kfp_contract_every_step_runs_twice_and_pushes(two_runs):
    model, spec, config, runs, _, versions = two_runs
    for produced in runs:
        assert list(produced) == topological_tasks(spec)
        assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1.0
        assert tf.io.gfile.exists(os.path.join(produced["Trainer"]["model"]["uri"], "Format-Serving",
                                               "saved_model.pb"))
    assert len(versions[0]) == 1 and len(versions[1]) == 2, versions
    newest = os.path.join(config.serving_model_dir, str(versions[1][-1]))
    assert tf.io.gfile.exists(os.path.join(newest, "saved_model.pb"))


def test_kfp_contract_second_run_compared_with_the_served_model(two_runs):
    _, _, config, runs, _, versions = two_runs
    first = runs[0]["Evaluator"]["blessing"]["metadata"]
    second = runs[1]["Evaluator"]["blessing"]["metadata"]
    assert "baseline_model_id" not in first and "baseline_model_uri" not in first  # nothing served yet
    served = os.path.join(config.serving_model_dir, str(versions[0][0]))
    assert second["baseline_model_uri"] == served
    assert "baseline_model_id" not in second  # no id of an artifact KFP never saw (was: KeyError: 0)
    # The candidate's id was translated back to the KFP artifact name of the Trainer's model.
    assert second["current_model_id"] == runs[1]["Trainer"]["model"]["name"]


def test_kfp_contract_inputs_are_what_the_backend_passes(two_runs):
    """The emulation is no friendlier than the backend: empty schemas, ids as names, URIs under the run."""
    model, spec, config, runs, inputs, _ = two_runs
    trainer = inputs[1]["Trainer"]
    examples = trainer["inputs"]["artifacts"]["examples"]["artifacts"][0]
    assert examples["type"] == {"instanceSchema": ""}
    assert examples["name"] == runs[1]["Transform"]["transformed_examples"]["name"]
    assert json.loads(examples["metadata"]["split_names"]) == ["train", "eval"] or \
        sorted(json.loads(examples["metadata"]["split_names"])) == ["eval", "train"]
    assert examples["metadata"]["display_name"] == "transformed_examples"
    model_out = trainer["outputs"]["artifacts"]["model"]["artifacts"][0]
    assert model_out["uri"] == f"{spec['defaultPipelineRoot']}/{spec['pipelineInfo']['name']}/run-2/Trainer/model"
    assert "name" not in model_out
    assert trainer["outputs"]["outputFile"].endswith("/kfp_outputs/output_metadata.json")
    assert spec["defaultPipelineRoot"] == f"{config.output_dir}/tfx"


def test_kfp_contract_launcher_refuses_a_local_root(tmp_path):
    """Without the emulator's allowance, a local root fails like the real launcher, before any step runs."""
    spec = {"pipelineInfo": {"name": "p"}, "components": {"c": {"executorLabel": "e", "outputDefinitions": {
        "artifacts": {"out": {"artifactType": {"instanceSchema": "title: tfx.Examples\n"}}}}}},
        "deploymentSpec": {"executors": {"e": {"container": {"command": ["false"]}}}},
        "root": {"dag": {"tasks": {"A": {"componentRef": {"name": "c"}, "taskInfo": {"name": "A"}}}}}}
    with pytest.raises(TaskFailed, match="unsupported storage scheme"):
        Cluster(str(tmp_path)).run(spec, runtime_root=str(tmp_path / "root"))

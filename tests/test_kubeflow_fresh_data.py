"""Fresh data is never served stale from KFP's cache (pipeline/kubeflow/fresh_data.py).

The compiled pipeline runs through tests/support/kfp_contract.py, whose cache is KFP's own
(cacheutils/cache.go key, enableCache per task, cached outputs reused; the file cites the
source): the input-resolution step always runs, and the ExampleGen is a cache hit exactly
while its input's listing is unchanged. The cheap cases run the resolution step and the
ExampleGen only; the whole pipeline twice (downstream hits) is behind ``slow``.
"""
from __future__ import annotations

import json
import os
import time

import numpy as np
import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from PIL import Image
from support.kfp_contract import Cluster, TaskFailed, root_parameters, topological_tasks
from test_kubeflow_contract import compile_for_contract

from components.data_facts import PROPERTIES
from pipeline.kubeflow.fresh_data import RESOLVE_TASK, override_caching

pytestmark = pytest.mark.timeout(900)
EXAMPLE_GEN = "ImportExampleGen"


def _images(root, classes: dict[str, int], seed: int):
    rng = np.random.default_rng(seed)
    for cls, count in classes.items():
        os.makedirs(root / cls, exist_ok=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (6, 6, 3), dtype=np.uint8)).save(root / cls / f"{seed}-{i}.png")
    return root


def _cnn(tmp_path, data, **settings):
    spec, _, config, _ = compile_for_contract("cnn", tmp_path, cache=True, data=str(data),
                                              family_settings={"image_size": 4, "channels": 1}, **settings)
    return spec, config


def test_kfp_contract_compiled_resolution_step_feeds_the_example_gen(tmp_path):
    spec, _ = _cnn(tmp_path, tmp_path / "pets", span_pattern="span-{SPAN}")
    json_format.ParseDict(spec, pipeline_spec_pb2.PipelineSpec())  # still a valid PipelineSpec
    tasks = spec["root"]["dag"]["tasks"]
    assert tasks[RESOLVE_TASK]["cachingOptions"] == {"enableCache": False}
    assert all(t["cachingOptions"]["enableCache"] for name, t in tasks.items() if name != RESOLVE_TASK)
    assert topological_tasks(spec)[:2] == [RESOLVE_TASK, EXAMPLE_GEN]
    assert RESOLVE_TASK in tasks[EXAMPLE_GEN]["dependentTasks"]
    wired = tasks[EXAMPLE_GEN]["inputs"]["parameters"]
    for key in ("input_config", "input_fingerprint", "span", "version"):
        assert wired[key] == {"taskOutputParameter": {"producerTask": RESOLVE_TASK, "outputParameterKey": key}}
    given = tasks[RESOLVE_TASK]["inputs"]["parameters"]
    # The data path is a runtime parameter (pipeline/kubeflow/runtime_parameters.py), compiled as its default.
    assert given["input_base"] == {"componentInputParameter": "data"}
    assert spec["root"]["inputDefinitions"]["parameters"]["data"]["defaultValue"] == str(tmp_path / "pets")
    assert "span-{SPAN}" in given["input_config"]["runtimeValue"]["constant"]
    executors = spec["deploymentSpec"]["executors"]
    example_gen = executors[spec["components"][EXAMPLE_GEN]["executorLabel"]]["container"]
    resolver = executors[spec["components"][RESOLVE_TASK]["executorLabel"]]["container"]
    assert resolver["image"] == example_gen["image"]
    assert "lifecycle" not in example_gen  # TFX's Vertex-only driver hook would re-resolve the span
    inputs_spec = json.loads(example_gen["args"][example_gen["args"].index("--json_serialized_inputs_spec_args") + 1])
    assert inputs_spec["parameters"]["span"] == {"parameterType": "NUMBER_INTEGER"}
    # `deploy --cache on` cannot turn the resolution step's cache on.
    assert {n: t["cachingOptions"]["enableCache"] for n, t in override_caching(spec, True)["root"]["dag"][
        "tasks"].items()} == {n: n != RESOLVE_TASK for n in tasks}


def test_kfp_contract_example_gen_is_cached_until_the_data_changes(tmp_path):
    """Same folder URI throughout: unchanged -> hit; a new file -> re-run with it; a new span -> read."""
    data = tmp_path / "pets"
    _images(data / "span-1", {"cat": 2, "dog": 2}, seed=0)
    spec, _ = _cnn(tmp_path, data, span_pattern="span-{SPAN}")
    cluster = Cluster(str(tmp_path), allow_local_root=True)
    root = spec["defaultPipelineRoot"]

    def run(run_id):
        produced = cluster.run(spec, run_id=run_id, runtime_root=root, until=EXAMPLE_GEN)
        examples = produced[EXAMPLE_GEN]["examples"]
        return dict(cluster.states), examples, _facts(examples)

    states, first, facts = run("run-1")
    assert states == {RESOLVE_TASK: "COMPLETE", EXAMPLE_GEN: "COMPLETE"}
    assert facts["num_examples"] == 4 and first["metadata"]["span"] == 1.0
    assert first["metadata"]["input_fingerprint"] == cluster.output_parameters[RESOLVE_TASK]["input_fingerprint"]

    states, again, _ = run("run-2")
    assert states == {RESOLVE_TASK: "COMPLETE", EXAMPLE_GEN: "CACHED"}  # the listing always runs
    assert again["name"] == first["name"] and again["uri"] == first["uri"]

    _images(data / "span-1", {"emu": 1}, seed=1)
    states, changed, facts = run("run-3")
    assert states[EXAMPLE_GEN] == "COMPLETE" and changed["name"] != first["name"]
    assert facts["num_examples"] == 5 and "emu" in facts["classes"]

    time.sleep(1.1)  # TFX's own part of the fingerprint has one-second mtimes
    _images(data / "span-2", {"cat": 3, "dog": 3}, seed=2)
    states, newest, facts = run("run-4")
    assert states[EXAMPLE_GEN] == "COMPLETE" and newest["metadata"]["span"] == 2.0
    assert facts["num_examples"] == 6 and facts["classes"] == ["cat", "dog"]
    resolved = json.loads(cluster.executor_inputs[EXAMPLE_GEN]["inputs"]["parameterValues"]["input_config"])
    assert resolved["splits"][0]["pattern"] == "span-2/*"



def _facts(examples: dict) -> dict:
    """The data facts an ExampleGen step handed on as its Examples' KFP metadata (JSON text each)."""
    return {name: json.loads(examples["metadata"][name]) for name in PROPERTIES if name in examples["metadata"]}

@pytest.mark.parametrize("version, recorded", [(-1.0, None), (3.0, 3)])
def test_entrypoint_hands_the_resolved_input_over_as_tfx_driver_would(version, recorded):
    """No {VERSION}: no version property (TFX's driver leaves it None); else it is recorded as an int."""
    from pipeline.kubeflow.entrypoint import apply_resolved_input

    executor_input = {"inputs": {"parameterValues": {"input_fingerprint": "split:all,num_files:2\ntree:files=2",
                                                     "span": 2.0, "version": version}},
                      "outputs": {"artifacts": {"examples": {"artifacts": [{"metadata": {"keep": "me"}}]}}}}
    assert apply_resolved_input(executor_input)
    metadata = executor_input["outputs"]["artifacts"]["examples"]["artifacts"][0]["metadata"]
    assert metadata["span"] == 2 and metadata["keep"] == "me" and metadata["input_fingerprint"].endswith("files=2")
    assert metadata.get("version") == recorded
    assert executor_input["inputs"]["parameterValues"].get("version") == (version if recorded else None)
    assert not apply_resolved_input({"inputs": {"parameterValues": {"span": 1.0}}})  # not the ExampleGen


BAD_INPUT = [pytest.param("no-span", "--span-pattern", id="no-span"),
             pytest.param("missing-uri", "does not exist", id="missing-uri")]


def _bad_input(tmp_path, case):
    data = tmp_path / "pets"
    if case == "no-span":
        _images(data / "photos", {"cat": 1, "dog": 1}, seed=0)  # no span-N folder
    spec, _ = _cnn(tmp_path, data, span_pattern="span-{SPAN}")
    return data, spec


def _one_paragraph(text: str, data, expected: str) -> None:
    assert "Traceback" not in text and str(data) in text
    paragraph = text.split("error: ", 1)[1]
    assert len(paragraph.strip().splitlines()) == 1 and expected in paragraph


@pytest.mark.parametrize("case, expected", BAD_INPUT)
def test_kfp_contract_bad_input_is_one_paragraph_from_the_resolution_step(tmp_path, capsys, case, expected):
    """The step's own command on the ExecutorInput the backend passes (in this process: quick)."""
    from pipeline.kubeflow.resolve_input import main

    data, spec = _bad_input(tmp_path, case)
    run_values = root_parameters(spec, {})  # the root's defaults, as the backend fills them
    parameters = {k: v["runtimeValue"]["constant"] if "runtimeValue" in v else run_values[v["componentInputParameter"]]
                  for k, v in spec["root"]["dag"]["tasks"][RESOLVE_TASK]["inputs"]["parameters"].items()}
    output_file = tmp_path / "pod" / "kfp_outputs" / "output_metadata.json"
    executor_input = {"inputs": {"parameterValues": parameters}, "outputs": {"outputFile": str(output_file)}}
    assert main(["--executor_input", json.dumps(executor_input)]) == 2
    _one_paragraph(capsys.readouterr().err, data, expected)
    assert not output_file.exists()


@pytest.mark.slow
@pytest.mark.parametrize("case, expected", BAD_INPUT)
def test_kfp_contract_bad_input_fails_the_resolution_pod(tmp_path, case, expected):
    data, spec = _bad_input(tmp_path, case)
    with pytest.raises(TaskFailed) as failed:
        Cluster(str(tmp_path), allow_local_root=True).run(spec, runtime_root=spec["defaultPipelineRoot"],
                                                           until=RESOLVE_TASK)
    assert failed.value.task == RESOLVE_TASK and "exit status 2" in str(failed.value)
    _one_paragraph(str(failed.value), data, expected)


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.timeout(3600)
def test_kfp_contract_whole_pipeline_cached_downstream_until_new_data(tmp_path):
    """Unchanged data: every step after the listing is a KFP cache hit; a new file: all re-run, one more push."""
    from artifacts.serving_dir import list_versions

    data = _images(tmp_path / "pets", {"cat": 6, "dog": 6}, seed=0)
    spec, config = _cnn(tmp_path, data, train_steps=5)
    cluster = Cluster(str(tmp_path), allow_local_root=True)
    tasks = topological_tasks(spec)
    cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"])
    assert set(cluster.states.values()) == {"COMPLETE"} and len(list_versions(config.serving_model_dir)) == 1
    cluster.run(spec, run_id="run-2", runtime_root=spec["defaultPipelineRoot"])
    assert cluster.states == {t: "COMPLETE" if t == RESOLVE_TASK else "CACHED" for t in tasks}
    _images(data, {"emu": 2}, seed=1)
    produced = cluster.run(spec, run_id="run-3", runtime_root=spec["defaultPipelineRoot"])
    assert set(cluster.states.values()) == {"COMPLETE"}
    assert "emu" in _facts(produced[EXAMPLE_GEN]["examples"])["classes"]
    assert len(list_versions(config.serving_model_dir)) == 2


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_kfp_contract_spans_in_an_s3_bucket_through_the_resolution_step(tmp_path):
    """--data in a bucket (moto's S3 server plays MinIO): listed through tensorflow-io, newest span read."""
    from support import s3_server

    from pipeline.kubeflow.storage import s3_environment

    keys = {"AWS_ACCESS_KEY_ID": s3_server.BUNDLED_KEYS["accesskey"],
            "AWS_SECRET_ACCESS_KEY": s3_server.BUNDLED_KEYS["secretkey"]}
    with s3_server.s3_server("data") as address:
        endpoint, client = f"http://{address}", s3_server.client(address)

        def upload(span: str, classes: dict[str, int], seed: int) -> None:
            local = _images(tmp_path / "upload" / span, classes, seed)
            for path in sorted(local.rglob("*.png")):
                client.upload_file(str(path), "data", f"pets/{span}/{path.relative_to(local)}")

        upload("span-1", {"cat": 2, "dog": 2}, seed=0)
        spec, _ = _cnn(tmp_path, "s3://data/pets", span_pattern="span-{SPAN}")
        cluster = Cluster(str(tmp_path), allow_local_root=True, env={**s3_environment(endpoint), **keys})
        produced = cluster.run(spec, runtime_root=spec["defaultPipelineRoot"], until=EXAMPLE_GEN)
        assert _facts(produced[EXAMPLE_GEN]["examples"])["num_examples"] == 4
        first = dict(cluster.output_parameters[RESOLVE_TASK])
        assert first["span"] == 1 and "tree:files=4" in first["input_fingerprint"]
        upload("span-2", {"cat": 1, "dog": 1}, seed=1)
        cluster.run(spec, runtime_root=spec["defaultPipelineRoot"], until=RESOLVE_TASK)
        assert cluster.output_parameters[RESOLVE_TASK]["span"] == 2


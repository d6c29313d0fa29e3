"""``python -m pipeline tfjob``: the manifest the Kubeflow Training Operator accepts, and the
TF_CONFIG it then sets, read back by the project's multi-worker code.

No cluster here: the manifest is validated by ``jsonschema`` against the TFJob CRD's own schema
(kubeflow/training-operator v1.9.0, trimmed: tests/data/tfjob_crd_schema.json says how) with
unknown fields rejected as ``kubectl apply --validate=strict`` does, and against the operator's
admission webhook rules; TF_CONFIG is built per replica exactly as the operator's
genTFConfigJSONStr builds it (pkg/controller.v1/tensorflow/tensorflow.go), then parsed by
models/common/multi_worker.py. Training under that TF_CONFIG is tests/test_multi_worker.py.
"""
import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import PROJECT_ROOT

from models.common.multi_worker import read_tf_config
from pipeline.kubeflow.training.tfjob import PORT, PORT_NAME, TFJobSettings, tfjob_manifest

SCHEMA = json.loads((PROJECT_ROOT / "tests" / "data" / "tfjob_crd_schema.json").read_text())
EXAMPLES = "gs://bucket/tfx/cnn-pipeline/ImportExampleGen/examples/12"
GRAPH = "gs://bucket/tfx/cnn-pipeline/Transform/transform_graph/12"


def strict_json_schema(schema: dict) -> dict:
    """A CRD's openAPIV3Schema as JSON Schema for ``jsonschema``, with unknown fields rejected as
    ``kubectl apply --validate=strict`` rejects them: an object that lists its properties, has no
    ``additionalProperties`` and does not preserve unknown fields gets ``additionalProperties: false``;
    Kubernetes' ``x-kubernetes-int-or-string`` becomes integer-or-string."""
    out = dict(schema)
    if "properties" in schema:
        out["properties"] = {name: strict_json_schema(item) for name, item in schema["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(schema.get(key), dict):
            out[key] = strict_json_schema(schema[key])
    for key in ("anyOf", "allOf", "oneOf"):
        if key in schema:
            out[key] = [strict_json_schema(item) for item in schema[key]]
    if schema.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("type") == "object" and "properties" in schema and "additionalProperties" not in schema \
            and not schema.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def violations(value, schema: dict) -> list[str]:
    """What the API server's structural-schema validation (strict) says of ``value``, by jsonschema."""
    import jsonschema

    validator = jsonschema.Draft7Validator(strict_json_schema(schema))
    return sorted("".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path) + ": "
                  + error.message for error in validator.iter_errors(value))


def webhook_problems(manifest: dict) -> list[str]:
    """The operator's validateTFJob (pkg/webhooks/tensorflow/tfjob_webhook.go)."""
    problems = []
    if not re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"]):
        problems.append("metadata.name: not a DNS-1035 label")
    specs = manifest["spec"].get("tfReplicaSpecs") or {}
    if not specs:
        problems.append("tfReplicaSpecs: must be required")
    for kind, spec in specs.items():
        containers = spec["template"]["spec"].get("containers") or []
        if not containers or any(not c.get("image") for c in containers):
            problems.append(f"{kind}: containers with images must be specified")
        if not any(c.get("name") == "tensorflow" for c in containers):
            problems.append(f"{kind}: must have at least one container with name tensorflow")
    if sum(kind in ("Chief", "Master") for kind in specs) > 1:
        problems.append("must not have more than 1 Chief or Master role")
    return problems


def operator_tf_config(manifest: dict, replica_type: str, index: int, cluster_domain: str = "") -> str:
    """genTFConfigJSONStr for one pod: every replica type lower-cased, one address per replica
    (GenGeneralName(job, type, i) + ".<namespace>.svc" [+ "." + CUSTOM_CLUSTER_DOMAIN]), the port
    of the container port named tfjob-port (else 2222); Go's json.Marshal: map keys sorted,
    struct fields in order (cluster, task, environment), no spaces."""
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    cluster = {}
    for kind, spec in manifest["spec"]["tfReplicaSpecs"].items():
        container = next(c for c in spec["template"]["spec"]["containers"] if c["name"] == "tensorflow")
        port = next((p["containerPort"] for p in container.get("ports", []) if p.get("name") == "tfjob-port"), 2222)
        hosts = [f"{name}-{kind.lower()}-{i}.{namespace}.svc" + (f".{cluster_domain}" if cluster_domain else "")
                 for i in range(spec.get("replicas", 1))]
        cluster[kind.lower()] = [f"{host}:{port}" for host in hosts]
    config = {"cluster": dict(sorted(cluster.items())), "task": {"type": replica_type.lower(), "index": index},
              "environment": "cloud"}
    return json.dumps(config, separators=(",", ":"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> dict:
    """The manifest `python -m pipeline tfjob` writes for 3 workers (digits, 40 steps)."""
    from pipeline.cli import main

    out = tmp_path_factory.mktemp("tfjob")
    assert main(["tfjob", "--image", "registry.example.com/tfx-project:v1", "--workers", "3",
                 "--examples", EXAMPLES, "--transform-graph", GRAPH, "--model-dir",
                 "gs://bucket/models/cnn-1", "--name", "cnn-trainer", "--namespace", "team", "--cpu", "2",
                 "--output", str(out), "--to", str(out / "tfjob.yaml"), "--train-steps", "40"]) == 0
    return yaml.safe_load((out / "tfjob.yaml").read_text())


def test_manifest_matches_the_tfjob_crd_and_the_operator_webhook(generated: dict) -> None:
    assert generated["apiVersion"] == f"{SCHEMA['group']}/{SCHEMA['version']}" and generated["kind"] == SCHEMA["kind"]
    assert violations(generated, SCHEMA["openAPIV3Schema"]) == []
    assert webhook_problems(generated) == []
    replicas = generated["spec"]["tfReplicaSpecs"]
    assert {k: (v["replicas"], v["restartPolicy"]) for k, v in replicas.items()} == {
        "Chief": (1, "Never"), "Worker": (2, "Never")}
    container = replicas["Worker"]["template"]["spec"]["containers"][0]
    assert container["ports"] == [{"name": PORT_NAME, "containerPort": PORT}]
    assert container["resources"] == {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}
    assert container["command"] == ["python", "-m", "pipeline.kubeflow.training.trainer_worker"]


def test_the_checks_reject_what_the_api_server_and_operator_reject(generated: dict) -> None:
    broken = json.loads(json.dumps(generated))
    worker = broken["spec"]["tfReplicaSpecs"]["Worker"]
    worker["replicas"] = "two"
    worker["restartpolicy"] = "Never"
    worker["template"]["spec"]["containers"][0]["imagee"] = "x"
    assert violations(broken, SCHEMA["openAPIV3Schema"]) == sorted([
        ".spec.tfReplicaSpecs.Worker.replicas: 'two' is not of type 'integer'",
        ".spec.tfReplicaSpecs.Worker: Additional properties are not allowed ('restartpolicy' was unexpected)",
        ".spec.tfReplicaSpecs.Worker.template.spec.containers[0]: Additional properties are not allowed "
        "('imagee' was unexpected)"])
    worker["template"]["spec"]["containers"][0]["name"] = "trainer"
    broken["spec"]["tfReplicaSpecs"]["Master"] = broken["spec"]["tfReplicaSpecs"]["Chief"]
    broken["metadata"]["name"] = "CNN_trainer"
    assert len(webhook_problems(broken)) == 3


@pytest.mark.parametrize("domain", ["", "cluster.local"])
def test_multi_worker_reads_the_tf_config_the_operator_sets_in_each_pod(generated: dict, domain: str) -> None:
    places = []
    for kind, spec in generated["spec"]["tfReplicaSpecs"].items():
        for index in range(spec["replicas"]):
            raw = operator_tf_config(generated, kind, index, domain)
            places.append(read_tf_config({"TF_CONFIG": raw}))
    assert [(p.task_type, p.task_index, p.is_chief) for p in places] == [
        ("chief", 0, True), ("worker", 0, False), ("worker", 1, False)]
    assert {p.num_workers for p in places} == {3}
    suffix = ".svc.cluster.local:2222" if domain else ".svc:2222"
    assert places[0].cluster == {"chief": [f"cnn-trainer-chief-0.team{suffix}"],
                                 "worker": [f"cnn-trainer-worker-{i}.team{suffix}" for i in (0, 1)]}


def test_every_pod_runs_the_pipelines_own_trainer_settings_multi_worker(generated: dict) -> None:
    from pipeline.kubeflow.training.trainer_worker import fn_args

    args = [c["args"] for spec in generated["spec"]["tfReplicaSpecs"].values()
            for c in spec["template"]["spec"]["containers"]]
    assert len({json.dumps(a) for a in args}) == 1 and args[0][0] == "--job"
    job = json.loads(args[0][1])
    assert job["run_fn"] == "models.cnn.trainer.run_fn" and job["train_steps"] == 40
    training = job["custom_config"]["training"]
    assert training["strategy"] == "multi_worker" and job["custom_config"]["data_facts"]["image_shape"] == [8, 8, 1]
    assert job["custom_config"]["model_family"] == "cnn"
    fn = fn_args(job)
    assert fn.train_files == [f"{EXAMPLES}/Split-train/*"] and fn.eval_files == [f"{EXAMPLES}/Split-eval/*"]
    assert fn.serving_model_dir == "gs://bucket/models/cnn-1/Format-Serving" and fn.transform_output == GRAPH


@pytest.mark.parametrize("change, flag", [
    ({"examples": "/tmp/local/examples"}, "--examples"),
    ({"name": "CNN_trainer"}, "--name"),
    ({"workers": 0}, "--workers"),
])
def test_bad_settings_name_the_flag(change: dict, flag: str) -> None:
    from stackenv.errors import ConfigError

    settings = TFJobSettings(**{"image": "i", "examples": EXAMPLES, "transform_graph": GRAPH,
                                "model_dir": "gs://b/m", **change})
    with pytest.raises(ConfigError) as caught:
        tfjob_manifest({}, settings)
    assert flag in str(caught.value) and "\n" not in str(caught.value)


def test_one_worker_is_a_chief_alone() -> None:
    settings = TFJobSettings(image="i", examples=EXAMPLES, transform_graph=GRAPH, model_dir="gs://b/m",
                             workers=1)
    manifest = tfjob_manifest({"run_fn": "x"}, settings)
    assert list(manifest["spec"]["tfReplicaSpecs"]) == ["Chief"]
    assert read_tf_config({"TF_CONFIG": operator_tf_config(manifest, "Chief", 0)}).is_chief


def test_schema_file_is_the_trimmed_v1_crd() -> None:
    assert Path(PROJECT_ROOT / "scripts" / "trim_tfjob_crd.py").is_file()
    replica = SCHEMA["openAPIV3Schema"]["properties"]["spec"]["properties"]["tfReplicaSpecs"]["additionalProperties"]
    assert {"replicas", "restartPolicy", "template"} <= set(replica["properties"])


@pytest.mark.slow
def test_multi_worker_pod_command_trains_and_the_chief_exports(generated: dict, cnn_transform, digits_examples,
                                                               tmp_path) -> None:
    """The manifest's own command and job, on local copies of its inputs, under an operator TF_CONFIG."""
    import os
    import subprocess
    import sys

    from conftest import free_ports, write_trainer_splits

    output, _ = cnn_transform
    examples = tmp_path / "examples"  # the CNN's Trainer reads ExampleGen's examples
    write_trainer_splits(digits_examples[:300], examples, 240)
    container = generated["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]
    job = json.loads(container["args"][1])
    job.update(examples=str(examples), transform_graph=output._transform_output_dir,  # noqa: SLF001
               serving_model_dir=str(tmp_path / "model" / "Format-Serving"),
               model_run_dir=str(tmp_path / "model" / "model_run"), train_steps=20, eval_steps=2)
    chief = json.loads(operator_tf_config(tfjob_manifest(job, TFJobSettings(
        image="i", examples=EXAMPLES, transform_graph=GRAPH, model_dir="gs://b/m", workers=1)), "Chief", 0))
    chief["cluster"]["chief"] = [f"localhost:{free_ports(1)[0]}"]  # the pod's service address, here
    command = [sys.executable if part == "python" else part for part in container["command"]]
    result = subprocess.run([*command, "--job", json.dumps(job)], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=600, env=dict(os.environ, TF_CONFIG=json.dumps(chief)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "model" / "Format-Serving" / "saved_model.pb").is_file()

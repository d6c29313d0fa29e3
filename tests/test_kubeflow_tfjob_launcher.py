"""``compile --trainer-workers N``: the Trainer step trains in a TFJob it creates through the Kubernetes API.

Tested up to the API boundary: tests/support/k8s_tfjob_api.py is a local HTTP API server for TFJobs
with the Training Operator's reconciler (derived from their source; it validates against the
CRD schema and runs each pod's own command as a local process). The launcher talks to it
through the real ``kubernetes`` client and a kubeconfig. Fast here: the compiled YAML, API
refusals (RBAC, no CRD, unreachable, invalid), a worker that dies, the timeout. Slow: the
whole compiled pipeline through the KFP contract emulator with the Trainer as a 2-worker TFJob.
"""
import base64
import json
import os

import pytest
import yaml
from conftest import DIGIT_FACTS
from support.k8s_tfjob_api import TFJobApiServer

from pipeline.config import PipelineConfig
from pipeline.kubeflow.training.kube_api import KubeApiError, connect
from pipeline.kubeflow.training.trainer_launcher import TEMPLATE_ENV, TFJOB_KEY, TFJobFailed, launch, launcher_config

IMAGE = "registry.example.com/tfx-project:test"


def _fn_args(tmp_path, workers: int = 2, timeout_s: float = 120, run_fn: str = "models.cnn.trainer.run_fn"):
    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.common.training import TrainingSettings

    settings = TrainingSettings(strategy="multi_worker", batch_size=16, learning_rate=3e-3, epochs=1)
    _, custom = launcher_config(run_fn, {**settings.to_custom_config(), **DIGIT_FACTS, "model_family": "cnn"},
                                workers, timeout_s)
    examples = tmp_path / "ImportExampleGen" / "examples"
    return FnArgs(train_files=[f"{examples}/Split-train/*"], eval_files=[f"{examples}/Split-eval/*"],
                  transform_graph_path=str(tmp_path / "Transform" / "transform_graph"),
                  serving_model_dir=str(tmp_path / "Trainer" / "model" / "Format-Serving"),
                  model_run_dir=str(tmp_path / "Trainer" / "model_run"), train_steps=10, eval_steps=1,
                  custom_config=custom, hyperparameters=None)


def _api(server: TFJobApiServer, tmp_path):
    return connect(environ={"KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})


TEMPLATE = {"image": IMAGE, "container": {"env": [{"name": "PIPELINE_SECRET", "valueFrom": {
    "secretKeyRef": {"name": "creds", "key": "password"}}}]}, "pod": {}}


def test_compiled_trainer_step_launches_a_tfjob_of_n_workers(tmp_path):
    from pipeline.kubeflow.compile import compile_pipeline
    from pipeline.kubeflow.platform import StepSettings

    config = PipelineConfig(model="cnn", output_dir="gs://bucket/root", train_steps=30, trainer_workers=3)
    settings = StepSettings(trainer_cpu="4", trainer_memory="8Gi", trainer_gpus=1, cpu_request="500m",
                            tolerations=["nvidia.com/gpu=present:NoSchedule"],
                            secret_env=["creds:password=PIPELINE_SECRET"])
    package = compile_pipeline(config, None, IMAGE, str(tmp_path / "p.yaml"), settings)
    spec = next(yaml.safe_load_all(open(package)))
    trainer = spec["root"]["dag"]["tasks"]["Trainer"]["inputs"]["parameters"]
    assert trainer["run_fn"]["runtimeValue"]["constant"] == "pipeline.kubeflow.training.trainer_launcher.run_fn"
    custom = json.loads(trainer["custom_config"]["runtimeValue"]["constant"])
    assert custom[TFJOB_KEY] == {"workers": 3, "run_fn": "models.cnn.trainer.run_fn", "timeout_seconds": 86400}
    assert custom["training"]["strategy"] == "multi_worker"
    container = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    assert container["resources"] == spec["deploymentSpec"]["executors"]["Transform_executor"]["container"][
        "resources"] == {"cpuRequest": 0.5}  # the launcher only waits: no GPU, no trainer CPU
    template = json.loads(next(e["value"] for e in container["env"] if e["name"] == TEMPLATE_ENV))
    assert template["image"] == IMAGE
    assert template["container"]["resources"] == {"requests": {"cpu": "4", "memory": "8Gi"},
                                                  "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}}
    assert template["container"]["env"] == TEMPLATE["container"]["env"]
    assert template["pod"]["tolerations"][0]["key"] == "nvidia.com/gpu"


@pytest.mark.parametrize("change, flag", [({"trainer_workers": 0}, "--trainer-workers"),
                                          ({"trainer_workers": 2, "strategy": "default"}, "--trainer-workers"),
                                          ({"trainer_job_timeout": 0}, "--trainer-job-timeout")])
def test_bad_trainer_workers_settings_name_the_flag(change, flag):
    from stackenv.errors import ConfigError

    with pytest.raises(ConfigError, match=flag):
        PipelineConfig(model="cnn", **change)


def test_a_worker_that_dies_fails_the_step_with_the_tfjob_and_its_logs(tmp_path):
    with TFJobApiServer(tmp_path, secrets={"creds": {"password": "s3cret"}}) as server:
        server.kill_after["worker-0"] = 0.0
        api = _api(server, tmp_path)
        with pytest.raises(TFJobFailed) as caught:
            launch(_fn_args(tmp_path), api, TEMPLATE, poll_s=0.2)
        (manifest,) = server.created
        name = manifest["metadata"]["name"]
        pods = server.jobs[("team", name)]["pods"]
        assert {key: pod["process"].poll() is not None for key, pod in pods.items()} == {
            "chief-0": True, "worker-0": True}  # cleanPodPolicy Running: the chief was stopped too
    message = caught.value.paragraph
    assert f"TFJob team/{name} failed: TFJob team/{name} has failed because 1 Worker replica(s) failed" in message
    assert f"kubectl logs -n team -l training.kubeflow.org/job-name={name}" in message and "\n" not in message
    assert caught.value.exit_code == 1
    # What the pods got: the pipeline image's trainer_worker, the family's run_fn, the secret, TF_CONFIG.
    assert {k: v["replicas"] for k, v in manifest["spec"]["tfReplicaSpecs"].items()} == {"Chief": 1, "Worker": 1}
    container = manifest["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    job = json.loads(container["args"][1])
    assert container["image"] == IMAGE and job["run_fn"] == "models.cnn.trainer.run_fn" and TFJOB_KEY not in \
        job["custom_config"]
    assert job["serving_model_dir"] == str(tmp_path / "Trainer" / "model" / "Format-Serving")
    tf_config = json.loads(pods["worker-0"]["tf_config"])
    assert tf_config["task"] == {"type": "worker", "index": 0} and set(tf_config["cluster"]) == {"chief", "worker"}


@pytest.mark.parametrize("server_args, expected", [
    ({"forbidden": True}, "kubectl apply -f kubeflow/tfjob-rbac.yaml"),
    ({"crd_installed": False}, "has no training-job resource (no kubeflow.org/v1; no trainer.kubeflow.org/v1alpha1)"),
])
def test_api_refusals_are_one_paragraph_naming_the_fix(tmp_path, server_args, expected):
    with TFJobApiServer(tmp_path, **server_args) as server:
        with pytest.raises(KubeApiError) as caught:
            launch(_fn_args(tmp_path), _api(server, tmp_path), TEMPLATE, poll_s=0.2)
        assert server.created == []
    assert expected in caught.value.paragraph and "\n" not in caught.value.paragraph


def test_unreachable_api_server_and_wrong_credentials(tmp_path):
    with TFJobApiServer(tmp_path) as server:
        path = server.kubeconfig(tmp_path / "kubeconfig")
        server.token = "another-token"
        with pytest.raises(KubeApiError, match="rejected the credentials"):
            launch(_fn_args(tmp_path), connect(environ={"KUBECONFIG": path}), TEMPLATE, poll_s=0.2)
    with pytest.raises(KubeApiError, match="could not reach the Kubernetes API server"):
        launch(_fn_args(tmp_path), connect(environ={"KUBECONFIG": path}), TEMPLATE, poll_s=0.2)
    with pytest.raises(KubeApiError, match=r"\$KUBECONFIG"):
        connect(environ={"KUBECONFIG": str(tmp_path / "missing")}, service_account_dir=str(tmp_path))


def test_the_emulated_api_server_rejects_an_invalid_tfjob(tmp_path):
    with TFJobApiServer(tmp_path) as server:
        api = _api(server, tmp_path)
        bad = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": "Bad_Name"},
               "spec": {"tfReplicaSpecs": {"Chief": {"replicas": "one", "template": {"spec": {"containers": [
                   {"name": "trainer", "image": IMAGE}]}}}}}}
        with pytest.raises(KubeApiError, match="HTTP 422") as caught:
            api.create(bad)
    assert "is not of type 'integer'" in str(caught.value) and "container with name tensorflow" in str(caught.value)


def test_timeout_deletes_the_tfjob_and_names_the_setting(tmp_path):
    """The pods' secret is missing, so they stay Pending (as the kubelet leaves them) until the deadline."""
    with TFJobApiServer(tmp_path) as server:
        api = _api(server, tmp_path)
        with pytest.raises(TFJobFailed, match="--trainer-job-timeout 0.5 s") as caught:
            launch(_fn_args(tmp_path, timeout_s=0.5), api, TEMPLATE, poll_s=0.2)
        assert server.jobs == {}  # deleted, its pods killed
    assert "the step deleted it" in caught.value.paragraph


def test_a_restarted_step_follows_its_existing_tfjob(tmp_path):
    from pipeline.kubeflow.training.trainer_launcher import tfjob_for

    with TFJobApiServer(tmp_path, secrets={"creds": {"password": "s3cret"}}) as server:
        server.kill_after.update({"chief-0": 0.0, "worker-0": 0.0})
        api = _api(server, tmp_path)
        manifest = tfjob_for(_fn_args(tmp_path), api, TEMPLATE)
        first = api.create(manifest)
        again = api.create(manifest)  # 409 AlreadyExists: followed, not replaced
        assert again["metadata"]["uid"] == first["metadata"]["uid"] and len(server.created) == 1
        api.delete(manifest["metadata"]["name"])  # e.g. by hand, while the step follows it
        with pytest.raises(KubeApiError, match="disappeared while the Trainer step followed it"):
            api.get(manifest["metadata"]["name"])


def test_in_cluster_connection_reads_the_pods_service_account(tmp_path):
    claims = base64.urlsafe_b64encode(json.dumps(
        {"sub": "system:serviceaccount:kubeflow-user:default-editor"}).encode()).decode().rstrip("=")
    (tmp_path / "token").write_text(f"header.{claims}.signature")
    (tmp_path / "namespace").write_text("kubeflow-user\n")
    (tmp_path / "ca.crt").write_text("-----BEGIN CERTIFICATE-----\n")
    from pipeline.kubeflow.training.kube_api import TFJOB

    api = connect(environ={"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"},
                  service_account_dir=str(tmp_path), kind=TFJOB)  # no discovery: nothing listens there
    assert (api.namespace, api.service_account, api.server) == ("kubeflow-user", "default-editor",
                                                                "https://10.0.0.1:443")


def test_rbac_manifest_grants_what_the_launcher_calls():
    """kubeflow/tfjob-rbac.yaml: a Role with create/get/delete on tfjobs, bound to the pipeline's service account."""
    import inspect

    from conftest import PROJECT_ROOT

    from pipeline.kubeflow.training import kube_api

    role, binding = yaml.safe_load_all((PROJECT_ROOT / "kubeflow" / "tfjob-rbac.yaml").read_text())
    rules = {(tuple(rule["apiGroups"]), tuple(rule["resources"])): set(rule["verbs"]) for rule in role["rules"]}
    called = {verb for verb in ("create", "get", "delete", "list", "patch", "watch")
              if f"{verb}_namespaced_custom_object" in inspect.getsource(kube_api)}
    assert called == {"create", "get", "delete"}
    assert rules == {((kind.group,), (kind.plural,)): called for kind in kube_api.KINDS}
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"] == binding["subjects"][0]["namespace"]
    assert kube_api.RBAC_FILE == "kubeflow/tfjob-rbac.yaml"


@pytest.mark.slow  # a whole pipeline, every step a process, and two training workers on 2 cores
@pytest.mark.timeout(3600)
def test_compiled_pipeline_trains_in_a_two_worker_tfjob_and_the_evaluator_and_pusher_run_unchanged(tmp_path):
    """Every compiled step through the KFP contract emulator; the Trainer step's TFJob through the API emulator."""
    import tensorflow as tf
    from support.kfp_contract import Cluster
    from test_kubeflow_contract import SETTINGS

    from artifacts.serving_dir import list_versions
    from pipeline.kubeflow.compile import compile_pipeline

    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "root"), trainer_workers=2, **SETTINGS["cnn"])
    spec = next(yaml.safe_load_all(open(compile_pipeline(config, None, IMAGE, str(tmp_path / "p.yaml")))))
    container = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    # A KFP driver puts the container's env into the pod (driver.go); the contract emulator passes only its own.
    step_env = {e["name"]: e["value"] for e in container.get("env", [])}
    (tmp_path / "pods").mkdir()
    with TFJobApiServer(tmp_path / "pods") as server:
        cluster = Cluster(str(tmp_path), allow_local_root=True,
                          env={**step_env, "KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})
        produced = cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"])
        (manifest,) = server.created
        pods = server.jobs[("team", manifest["metadata"]["name"])]["pods"]
        codes = {key: pod["process"].returncode for key, pod in pods.items()}
        conditions = {c["type"]: c["status"] for c in server.jobs[("team", manifest["metadata"]["name"])][
            "object"]["status"]["conditions"]}
        logs = {key: server.log(f"{manifest['metadata']['name']}-{key}") for key in pods}
    assert conditions == {"Created": "True", "Running": "False", "Succeeded": "True"}, logs["chief-0"][-3000:]
    # A worker still exiting once the chief succeeded is deleted (cleanPodPolicy Running), as the operator does.
    assert codes["chief-0"] == 0 and codes["worker-0"] in (0, -9), logs["worker-0"][-3000:]
    assert all("Coordination agent has successfully connected" in log for log in logs.values())  # one cluster
    model_uri = produced["Trainer"]["model"]["uri"]
    assert tf.io.gfile.exists(os.path.join(model_uri, "Format-Serving", "saved_model.pb"))
    job = json.loads(manifest["spec"]["tfReplicaSpecs"]["Chief"]["template"]["spec"]["containers"][0]["args"][1])
    assert job["serving_model_dir"] == os.path.join(model_uri, "Format-Serving") and job["train_steps"] == 20
    assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1.0
    assert len(list_versions(config.serving_model_dir)) == 1


@pytest.mark.slow  # ExampleGen to Transform as processes, then a TFJob whose worker dies mid-run
@pytest.mark.timeout(3600)
def test_compiled_trainer_step_fails_with_the_tfjob_paragraph_when_a_worker_dies(tmp_path):
    from support.k8s_tfjob_api import run_with_a_dying_replica
    from test_kubeflow_contract import SETTINGS

    from pipeline.kubeflow.compile import compile_pipeline

    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "root"), trainer_workers=2,
                            **{**SETTINGS["cnn"], "train_steps": 400})
    spec = next(yaml.safe_load_all(open(compile_pipeline(config, None, IMAGE, str(tmp_path / "p.yaml")))))
    container = spec["deploymentSpec"]["executors"]["Trainer_executor"]["container"]
    step_env = {e["name"]: e["value"] for e in container.get("env", [])}
    # Killed once it took 5 of its 400 steps: it joined the cluster and trains (held there until killed, so a
    # fast machine cannot finish first; the chief waits for it at every step's all-reduce).
    failure, name, cluster, killed = run_with_a_dying_replica(tmp_path, spec, step_env, "worker-0",
                                                              at=("training steps", 5))
    assert killed["training steps"] == 5, killed
    assert failure.task == "Trainer"
    assert f"TFJob team/{name} has failed because 1 Worker replica(s) failed" in str(failure)
    assert f"kubectl logs -n team -l training.kubeflow.org/job-name={name}" in str(failure)
    assert "Evaluator" not in cluster.executor_inputs  # nothing evaluated, nothing pushed

"""Training on the cluster: TFJob or Kubeflow Trainer v2's TrainJob, whichever the cluster serves, and no Istio sidecar.

Through tests/support/k8s_tfjob_api.py (a local Kubernetes API server with discovery, the TFJob
operator's and the Trainer v2 controllers' behaviour, and Istio's injection webhook, each citing
its source) and the real ``kubernetes`` client: the kind detected by discovery, the TrainJob
manifest against the TrainJob CRD schema of kubeflow/trainer v2.1.0 and its webhooks, TF_CONFIG
derived in each TrainJob pod, a worker that dies, a missing runtime, and the Istio sidecar that
keeps a job Running forever unless the pods opt out.
"""
import json
import os

import pytest
from support.k8s_tfjob_api import TRAINJOB_SCHEMA, TFJobApiServer
from test_kubeflow_tfjob import violations
from test_kubeflow_tfjob_launcher import TEMPLATE, _fn_args

from models.common.multi_worker import read_tf_config
from pipeline.kubeflow.training.kube_api import TFJOB, TRAINJOB, KubeApiError, connect
from pipeline.kubeflow.training.tfjob import NO_SIDECAR, TFJobSettings
from pipeline.kubeflow.training.trainer_launcher import TFJobFailed, launch, tfjob_for, wait_for
from pipeline.kubeflow.training.trainjob import CLUSTER_ENV, TrainJobPodError, ensure_tf_config, job_manifest

IMAGE = "registry.example.com/tfx-project:test"
SECRETS = {"creds": {"password": "s3cret"}}
#: What a pod prints: the TF_CONFIG it runs under (derived in a TrainJob pod, set by the operator in a TFJob's).
PRINT_TF_CONFIG = ("from pipeline.kubeflow.training.trainjob import ensure_tf_config; import os; ensure_tf_config(); "
                   "print('TF_CONFIG=' + os.environ['TF_CONFIG'])")


def _api(server, tmp_path):
    return connect(environ={"KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})


def _probe_manifest(kind: str, name: str, workers: int = 2) -> dict:
    """The launchers' manifest of ``kind``, its pods running a short probe instead of training."""
    settings = TFJobSettings(image=IMAGE, examples="/x", transform_graph="/y", model_dir="/z",
                             workers=workers, name=name, namespace="team", pod=TEMPLATE, remote_only=False)
    manifest = job_manifest(kind, {"run_fn": "unused"}, settings)
    if kind == "TrainJob":
        manifest["spec"]["trainer"].update(command=["python", "-c", PRINT_TF_CONFIG], args=[])
    else:
        for replica in manifest["spec"]["tfReplicaSpecs"].values():
            replica["template"]["spec"]["containers"][0].update(command=["python", "-c", PRINT_TF_CONFIG], args=[])
    return manifest


@pytest.mark.parametrize("apis, kind", [(("tfjob",), TFJOB), (("trainjob",), TRAINJOB), (("trainjob", "tfjob"), TFJOB)])
def test_the_job_kind_is_the_one_the_cluster_serves(tmp_path, apis, kind):
    with TFJobApiServer(tmp_path, apis=apis) as server:
        assert _api(server, tmp_path).kind == kind


def test_the_trainjob_the_launcher_creates_matches_the_crd_and_runs_every_pod_with_its_own_tf_config(tmp_path):
    with TFJobApiServer(tmp_path, apis=("trainjob",), secrets=SECRETS) as server:
        api = _api(server, tmp_path)
        manifest = tfjob_for(_fn_args(tmp_path, workers=3), api, TEMPLATE)
        assert violations(manifest, TRAINJOB_SCHEMA["openAPIV3Schema"]) == []
        assert manifest["spec"]["runtimeRef"] == {"name": "tfx-tensorflow", "apiGroup": "trainer.kubeflow.org",
                                                  "kind": "ClusterTrainingRuntime"}
        trainer = manifest["spec"]["trainer"]
        assert (trainer["image"], trainer["numNodes"]) == (IMAGE, 3)
        assert trainer["command"] == ["python", "-m", "pipeline.kubeflow.training.trainer_worker"]
        assert json.loads(trainer["args"][1])["run_fn"] == "models.cnn.trainer.run_fn"
        assert TEMPLATE["container"]["env"][0] in trainer["env"]
        [override] = manifest["spec"]["podTemplateOverrides"]
        assert override["targetJobs"] == [{"name": "node"}]
        assert override["metadata"] == {"labels": NO_SIDECAR, "annotations": NO_SIDECAR}

        probe = _probe_manifest("TrainJob", "probe", workers=3)
        api.create(probe)
        job = wait_for(api, "probe", timeout_s=60, poll_s=0.2)
        pods = server.jobs[("team", "probe")]["pods"]
        logs = {key: server.log(pod["name"]) for key, pod in pods.items()}
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"] == ["Complete"]
    places = []
    for key in ("node-0-0", "node-0-1", "node-0-2"):
        tf_config = next(line for line in logs[key].splitlines() if line.startswith("TF_CONFIG="))
        place = read_tf_config({"TF_CONFIG": tf_config.split("=", 1)[1]})
        places.append((place.task_type, place.task_index, len(place.cluster["worker"])))
    assert places == [("chief", 0, 2), ("worker", 0, 2), ("worker", 1, 2)]


def test_the_emulated_api_server_rejects_an_invalid_trainjob(tmp_path):
    with TFJobApiServer(tmp_path, apis=("trainjob",)) as server:
        api = _api(server, tmp_path)
        bad = _probe_manifest("TrainJob", "probe")
        bad["spec"]["trainer"]["numNodes"] = "two"
        bad["spec"]["trainer"]["imag"] = IMAGE
        with pytest.raises(KubeApiError, match="HTTP 422") as caught:
            api.create(bad)
        assert "is not of type 'integer'" in str(caught.value)
        assert ".spec.trainer: Additional properties are not allowed ('imag' was unexpected)" in str(caught.value)
        env_override = _probe_manifest("TrainJob", "probe")
        env_override["spec"]["podTemplateOverrides"][0]["spec"] = {"containers": [
            {"name": "node", "env": [{"name": "A", "value": "1"}]}]}
        with pytest.raises(KubeApiError, match="must not have envs for the"):
            api.create(env_override)
        assert server.created == []


def test_a_cluster_without_the_projects_runtime_is_one_paragraph(tmp_path):
    with TFJobApiServer(tmp_path, apis=("trainjob",), runtimes={}) as server:
        with pytest.raises(KubeApiError) as caught:
            launch(_fn_args(tmp_path), _api(server, tmp_path), TEMPLATE, poll_s=0.2)
    message = caught.value.paragraph
    assert "must be created before the TrainJob is created" in message and "\n" not in message
    assert "kubectl apply -f kubeflow/trainjob-runtime.yaml" in message and "tfjob-rbac" not in message


def test_a_trainjob_worker_that_dies_fails_the_step_with_the_jobset_message_and_its_logs(tmp_path):
    with TFJobApiServer(tmp_path, apis=("trainjob",), secrets=SECRETS) as server:
        server.kill_after["node-0-1"] = 0.0
        with pytest.raises(TFJobFailed) as caught:
            launch(_fn_args(tmp_path), _api(server, tmp_path), TEMPLATE, poll_s=0.2)
        (manifest,) = server.created
        name = manifest["metadata"]["name"]
        pods = server.jobs[("team", name)]["pods"]
        assert all(pod["process"].poll() is not None for pod in pods.values())  # the Job's other pods deleted
    message = caught.value.paragraph
    assert f"TrainJob team/{name} failed: jobset failed due to one or more job failures" in message
    assert f"kubectl logs -n team -l jobset.sigs.k8s.io/jobset-name={name}" in message
    assert f"kubectl delete trainjob {name} -n team" in message and "\n" not in message


@pytest.mark.parametrize("apis, kind", [(("tfjob",), "TFJob"), (("trainjob",), "TrainJob")])
def test_pods_opt_out_of_istio_so_the_job_can_finish_in_a_mesh_namespace(tmp_path, apis, kind):
    """Without the opt-out the injected istio-proxy never exits and the job never ends (kubeflow/trainer#1183).
    The TrainJob's runtime here lacks its own opt-out, so the launcher's override is what counts."""
    with TFJobApiServer(tmp_path, apis=apis, secrets=SECRETS, istio_injection=True,
                        runtimes=_runtime_without_opt_out() if kind == "TrainJob" else None) as server:
        api = _api(server, tmp_path)
        api.create(_probe_manifest(kind, "opted-out"))
        finished = wait_for(api, "opted-out", timeout_s=60, poll_s=0.2)
        assert {c["type"] for c in finished["status"]["conditions"] if c["status"] == "True"} & {"Succeeded",
                                                                                                 "Complete"}
        assert not any(pod["sidecar"] for pod in server.jobs[("team", "opted-out")]["pods"].values())

        bare = _probe_manifest(kind, "with-sidecars")
        for template in _pod_metadata_holders(bare):
            template.pop("metadata")
        api.create(bare)
        with pytest.raises(TFJobFailed, match="did not finish within"):
            wait_for(api, "with-sidecars", timeout_s=3, poll_s=0.2)


def _runtime_without_opt_out() -> dict:
    import yaml
    from conftest import PROJECT_ROOT

    runtime = yaml.safe_load((PROJECT_ROOT / "kubeflow" / "trainjob-runtime.yaml").read_text())
    for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        job["template"]["spec"]["template"].pop("metadata")
    return {runtime["metadata"]["name"]: runtime}


def _pod_metadata_holders(manifest: dict) -> list[dict]:
    if manifest["kind"] == "TrainJob":
        return manifest["spec"]["podTemplateOverrides"]
    return [replica["template"] for replica in manifest["spec"]["tfReplicaSpecs"].values()]


def test_the_shipped_runtime_opts_its_pods_out_of_istio_too(tmp_path):
    """A TrainJob without the launcher's override (e.g. made by hand from the runtime) still gets no sidecar."""
    with TFJobApiServer(tmp_path, apis=("trainjob",), secrets=SECRETS, istio_injection=True) as server:
        api = _api(server, tmp_path)
        manifest = _probe_manifest("TrainJob", "by-hand")
        manifest["spec"]["podTemplateOverrides"][0].pop("metadata")
        api.create(manifest)
        wait_for(api, "by-hand", timeout_s=60, poll_s=0.2)


@pytest.mark.parametrize("environ, problem", [
    ({CLUSTER_ENV: '{"chief": ["a:2222"], "worker": ["b:2222"]}'}, "JOB_COMPLETION_INDEX=''"),
    ({CLUSTER_ENV: '{"chief": ["a:2222"]}', "JOB_COMPLETION_INDEX": "3"}, "index 3 is not one of the 1 nodes"),
    ({CLUSTER_ENV: "{not json", "JOB_COMPLETION_INDEX": "0"}, "Expecting property name"),
])
def test_a_trainjob_pod_that_cannot_place_itself_is_one_paragraph(environ, problem):
    with pytest.raises(TrainJobPodError) as caught:
        ensure_tf_config(dict(environ))
    assert problem in caught.value.paragraph and "kubectl apply -f kubeflow/trainjob-runtime.yaml" in \
        caught.value.paragraph


def test_outside_a_trainjob_the_tf_config_is_left_alone():
    environ = {"TF_CONFIG": "as the operator set it", CLUSTER_ENV: '{"chief": ["a:2222"]}', "JOB_COMPLETION_INDEX": "0"}
    ensure_tf_config(environ)
    assert environ["TF_CONFIG"] == "as the operator set it"
    bare: dict = {}
    ensure_tf_config(bare)
    assert bare == {}


def test_the_rbac_file_grants_both_kinds():
    import yaml
    from conftest import PROJECT_ROOT

    role, _ = yaml.safe_load_all((PROJECT_ROOT / "kubeflow" / "tfjob-rbac.yaml").read_text())
    granted = {(group, resource): set(rule["verbs"]) for rule in role["rules"]
               for group in rule["apiGroups"] for resource in rule["resources"]}
    assert granted == {(TFJOB.group, TFJOB.plural): {"create", "get", "delete"},
                       (TRAINJOB.group, TRAINJOB.plural): {"create", "get", "delete"}}


@pytest.mark.slow  # two real TensorFlow workers (MultiWorkerMirroredStrategy) on 2 cores
@pytest.mark.timeout(1800)
def test_a_trainjob_trains_a_real_model_in_two_worker_processes(trainer_digits, digits_examples, tmp_path):
    """The launcher's TrainJob branch end to end: the manifest against the shipped ClusterTrainingRuntime, two
    pods as processes with only what a plain Trainer v2 runtime gives them (``trainer.env``, plainml.go
    EnforceMLPolicy, and the Indexed Job's ``JOB_COMPLETION_INDEX``; torch.go derives its node rank from the
    same index), one TensorFlow cluster of both, and the chief's export a model that classifies digits."""
    import numpy as np
    import tensorflow as tf
    from support.tf_serving_rest import predict

    fn_args = _fn_args(tmp_path, workers=2, timeout_s=1200)
    fn_args.train_files, fn_args.eval_files = trainer_digits["train_files"], trainer_digits["eval_files"]
    fn_args.transform_graph_path = trainer_digits["transform_output"]
    fn_args.train_steps = 40
    (tmp_path / "pods").mkdir()
    with TFJobApiServer(tmp_path / "pods", apis=("trainjob",), secrets=SECRETS) as server:
        job = launch(fn_args, _api(server, tmp_path), TEMPLATE, poll_s=0.5)
        (manifest,) = server.created
        pods = server.jobs[("team", manifest["metadata"]["name"])]["pods"]
        codes = {key: pod["process"].returncode for key, pod in pods.items()}
        given = {key: pod["env"] for key, pod in pods.items()}
        logs = {key: server.log(pod["name"]) for key, pod in pods.items()}
    assert manifest["kind"] == "TrainJob" and manifest["spec"]["trainer"]["numNodes"] == 2
    assert [c["type"] for c in job["status"]["conditions"] if c["status"] == "True"] == ["Complete"]
    assert codes == {"node-0-0": 0, "node-0-1": 0}, {key: log[-3000:] for key, log in logs.items()}
    assert given == {"node-0-0": {"JOB_COMPLETION_INDEX": "0"}, "node-0-1": {"JOB_COMPLETION_INDEX": "1"}}
    for log in logs.values():  # both joined one TensorFlow cluster (a lone worker starts no coordination service)
        assert "Coordination agent has successfully connected" in log, log[-3000:]
    serving = fn_args.serving_model_dir
    assert tf.io.gfile.exists(os.path.join(serving, "saved_model.pb"))
    with open(os.path.join(serving, "assets.extra", "training.json")) as handle:
        assert json.load(handle)["learning_rate"] == 3e-3  # the Trainer's settings reached the pods
    model = tf.saved_model.load(serving)
    held_out = digits_examples[300:500]
    images = [np.asarray(r["image"], dtype=np.float32).reshape(8, 8, 1).tolist() for r in held_out]
    answer = predict(model, {"signature_name": "predict_image", "instances": images})
    accuracy = np.mean([p["classes"] == r["label"].decode() for p, r in zip(answer["predictions"], held_out)])
    assert accuracy > 0.5, accuracy  # 10 classes: chance is 0.1

"""The emulated KFP launcher is as strict as KFP's, and the bundled store's URIs survive a step.

Tiny two-task pipelines (``python -c`` steps, no TFX) through tests/support/kfp_contract.py
against a real local S3 server: the object-store session, the inputs on the pod's disk, the
output URIs the launcher accepts back, the ExecutorOutput parse, the pod's env and secrets,
the scheduler's fit and parallel steps. Then pipeline/kubeflow/bundled_store.py on its own:
the endpoint a step finds, and the URIs it hands back.
"""
import json
import os
import re

import pytest
import yaml
from support.kfp_contract import Cluster, TaskFailed
from support.s3_server import BUNDLED_KEYS, keys, s3_server
from support.s3_server import client as s3_client

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.launcher_config import launcher_configmap
from pipeline.kubeflow.storage import KubeflowConfigError

BUCKET = "mlpipeline"
SALTED = "{root}/{task}/[0-9a-f-]{{36}}/{key}"  # driver.go provisionOutputs from 2.4.0: a uuid per execution
BUNDLED_SECRET = {"mlpipeline-minio-artifact": BUNDLED_KEYS}
SCHEMA = {"instanceSchema": "title: tfx.Examples\ntype: object\n"}
# A step that writes 1000 bytes as its output artifact through S3 (as TFX does on the bundled store),
# records what it sees of its environment, and reports `report` in its ExecutorOutput file.
PRODUCER = """
import json, os, sys, boto3
from pipeline.kubeflow.bundled_store import endpoint as bundled_endpoint
executor_input = json.loads(sys.argv[1])
uri = executor_input["outputs"]["artifacts"]["out"]["artifacts"][0]["uri"]
bucket, key = uri.split("://", 1)[1].split("/", 1)
endpoint = os.environ.get("S3_ENDPOINT") or bundled_endpoint()
boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").put_object(
    Bucket=bucket, Key=key + "/data.txt", Body=b"x" * 1000)
seen = executor_input["outputs"]["parameters"]["seen"]["outputFile"]
with open(seen, "w") as handle:
    handle.write(os.environ.get("GREETING", "") + ":" + os.environ.get("DB_PASSWORD", ""))
report = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
if report is not None:
    os.makedirs(os.path.dirname(executor_input["outputs"]["outputFile"]), exist_ok=True)
    with open(executor_input["outputs"]["outputFile"], "w") as handle:
        json.dump(report, handle)
"""
CONSUMER = "import sys"  # reads nothing: the launcher has already put its input on the pod's disk


def two_tasks(report: dict | None = None, producer_env: dict | None = None, root: str | None = None,
              independent_code: str | None = None) -> dict:
    """A -> B (B takes A's artifact), or two independent tasks running ``independent_code``."""
    a_args = ["{{$}}"] + ([json.dumps(report)] if report is not None else [])
    executors = {
        "exec-a": {"container": {"image": "img", "command": ["python", "-c", independent_code or PRODUCER],
                                 "args": a_args if not independent_code else ["A"],
                                 **({"env": [{"name": k, "value": v} for k, v in producer_env.items()]}
                                    if producer_env else {})}},
        "exec-b": {"container": {"image": "img", "command": ["python", "-c", independent_code or CONSUMER],
                                 "args": ["B"] if independent_code else ["{{$}}"]}}}
    components = {
        "comp-a": {"executorLabel": "exec-a", "outputDefinitions": {} if independent_code else {
            "artifacts": {"out": {"artifactType": SCHEMA}},
            "parameters": {"seen": {"parameterType": "STRING"}}}},
        "comp-b": {"executorLabel": "exec-b", "inputDefinitions": {} if independent_code else {
            "artifacts": {"examples": {"artifactType": SCHEMA}}}}}
    tasks = {"A": {"componentRef": {"name": "comp-a"}, "taskInfo": {"name": "A"}},
             "B": {"componentRef": {"name": "comp-b"}, "taskInfo": {"name": "B"}}}
    if not independent_code:
        tasks["B"].update(dependentTasks=["A"], inputs={"artifacts": {"examples": {
            "taskOutputArtifact": {"producerTask": "A", "outputArtifactKey": "out"}}}})
    spec = {"pipelineInfo": {"name": "tiny"}, "schemaVersion": "2.1.0", "components": components,
            "deploymentSpec": {"executors": executors}, "root": {"dag": {"tasks": tasks}}}
    if root:
        spec["defaultPipelineRoot"] = root
    return spec


def platform(**config) -> dict:
    """The same executor config for both tasks, as `compile` writes it for every step."""
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {"exec-a": config, "exec-b": config}}}}}


@pytest.fixture(scope="module")
def store():
    with s3_server(BUCKET, "team-bucket") as address:
        yield address


def bundled_cluster(tmp_path, store, **kwargs) -> Cluster:
    """A standalone KFP of the newest tested version: the store is its Service in the kubeflow namespace."""
    return Cluster(str(tmp_path), store_address=store, **{"secrets": BUNDLED_SECRET, **kwargs})


def bundled_keys_env() -> dict:
    """The secret as env, as `compile` puts it in the platform spec."""
    return platform(secretAsEnv=[{"secretName": "mlpipeline-minio-artifact", "keyToEnv": [
        {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
        {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}]}])


def test_bundled_store_inputs_are_downloaded_to_the_pod(tmp_path, store):
    cluster = bundled_cluster(tmp_path, store)
    produced = cluster.run(two_tasks(), run_id="r1", runtime_root="minio://mlpipeline/v2/artifacts",
                           platform=bundled_keys_env())
    out = produced["A"]["out"]["uri"]
    assert re.fullmatch(SALTED.format(root="minio://mlpipeline/v2/artifacts/tiny/r1", task="A", key="out"), out)
    key = out.split("://", 1)[1].split("/", 1)[1]
    assert keys(store, BUCKET, key + "/") == [key + "/data.txt"]
    assert cluster.pod_disk == {"A": 0, "B": 1000}  # every input on the consumer's disk
    pod = next(p for p in os.listdir(tmp_path) if p.startswith("pod-B-"))
    assert os.path.getsize(tmp_path / pod / f"minio/mlpipeline/{key}/data.txt") == 1000


def test_output_uri_outside_the_runs_bucket_fails_the_step(tmp_path, store):
    """Handing back the s3:// form of a minio:// output is what the launcher refuses (KeyFromURI)."""
    report = {"artifacts": {"out": {"artifacts": [{"uri": "s3://mlpipeline/v2/artifacts/tiny/r1/A/out"}]}}}
    with pytest.raises(TaskFailed, match="does not have expected bucket prefix 'minio://mlpipeline/v2/artifacts"):
        bundled_cluster(tmp_path, store).run(two_tasks(report), run_id="r1",
                                             runtime_root="minio://mlpipeline/v2/artifacts",
                                             platform=bundled_keys_env())


def test_executor_output_is_parsed_strictly(tmp_path, store):
    report = {"artifacts": {}, "parameterValues": {}, "outputArtifactUris": {}}
    with pytest.raises(TaskFailed, match="failed to unmarshall ExecutorOutput"):
        bundled_cluster(tmp_path, store).run(two_tasks(report), runtime_root="minio://mlpipeline/v2/artifacts",
                                             platform=bundled_keys_env())


def test_missing_bundled_secret_fails_the_step(tmp_path, store):
    cluster = bundled_cluster(tmp_path, store, secrets={})
    with pytest.raises(TaskFailed, match="Failed to get Bucket credentials from secret "
                                         "name='mlpipeline-minio-artifact' namespace='kubeflow'"):
        cluster.run(two_tasks(), runtime_root="minio://mlpipeline/v2/artifacts")


def test_the_run_root_is_the_runs_never_the_packages(tmp_path, store):
    """No runtime root: the backend's default, although the package records another one."""
    cluster = bundled_cluster(tmp_path, store)
    cluster.run(two_tasks(root="s3://elsewhere/tfx"), run_id="r2", platform=bundled_keys_env())
    out = cluster.executor_inputs["A"]["outputs"]["artifacts"]["out"]["artifacts"][0]["uri"]
    assert re.fullmatch(SALTED.format(root="minio://mlpipeline/v2/artifacts/tiny/r2", task="A", key="out"), out)


def test_s3_root_on_another_endpoint_needs_the_launchers_providers_config(tmp_path, store):
    """Without providers the launcher goes to AWS with the container's keys; with the ConfigMap that
    `compile` writes (pipeline/kubeflow/launcher_config.py) it opens the bucket at the endpoint."""
    root, endpoint = "s3://team-bucket/tfx", f"http://{store}"
    secrets = {"store-keys": BUNDLED_KEYS}
    step = platform(secretAsEnv=[{"secretName": "store-keys", "keyToEnv": [
        {"secretKey": "accesskey", "envVar": "AWS_ACCESS_KEY_ID"},
        {"secretKey": "secretkey", "envVar": "AWS_SECRET_ACCESS_KEY"}]}])
    spec = two_tasks(producer_env={"S3_ENDPOINT": endpoint})
    # From 2.5.0 the first step's launcher already fails, uploading its log (executor-logs) to AWS.
    with pytest.raises(TaskFailed, match="A: .*lookup s3.amazonaws.com: no such host"):
        Cluster(str(tmp_path), secrets=secrets).run(spec, runtime_root=root, platform=step)
    configmap = launcher_configmap(root, endpoint, "store-keys")
    cluster = Cluster(str(tmp_path), secrets=secrets, launcher_config=configmap["data"])
    produced = cluster.run(spec, run_id="r3", runtime_root=root, platform=step)
    assert re.fullmatch(SALTED.format(root="s3://team-bucket/tfx/tiny/r3", task="A", key="out"),
                        produced["A"]["out"]["uri"]) and cluster.pod_disk["B"] == 1000
    assert yaml.safe_load(configmap["data"]["providers"])["s3"]["default"]["disableSSL"] is True


def test_platform_spec_reaches_the_step(tmp_path, store):
    spec = two_tasks(producer_env={"GREETING": "hello"})
    step = bundled_keys_env()
    config = step["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-a"]
    config["secretAsEnv"].append({"secretName": "db", "keyToEnv": [{"secretKey": "password", "envVar": "DB_PASSWORD"}]})
    cluster = bundled_cluster(tmp_path, store, secrets={**BUNDLED_SECRET, "db": {"password": "s3cret"}})
    cluster.run(spec, runtime_root="minio://mlpipeline/v2/artifacts", platform=step)
    assert cluster.output_parameters["A"]["seen"] == "hello:s3cret"
    with pytest.raises(TaskFailed, match="CreateContainerConfigError: secret 'db' not found"):
        bundled_cluster(tmp_path, store).run(spec, runtime_root="minio://mlpipeline/v2/artifacts", platform=step)
    config["nodeSelector"] = {"labels": {"pool": "gpu"}}
    with pytest.raises(TaskFailed, match="didn't match Pod's node affinity/selector"):
        cluster.run(spec, runtime_root="minio://mlpipeline/v2/artifacts", platform=step)
    spec["deploymentSpec"]["executors"]["exec-a"]["container"]["resources"] = {
        "accelerator": {"type": "nvidia.com/gpu", "count": 1}}
    with pytest.raises(TaskFailed, match="Insufficient nvidia.com/gpu"):
        cluster.run(spec, runtime_root="minio://mlpipeline/v2/artifacts")


def test_independent_steps_run_at_the_same_time(tmp_path, store):
    """Each task waits for the other's marker: one after the other, the first would give up and fail."""
    code = ("import os, sys, time\nme, other = sys.argv[1], {'A': 'B', 'B': 'A'}[sys.argv[1]]\n"
            f"open(os.path.join({str(tmp_path)!r}, me), 'w').close()\n"
            f"deadline = time.time() + 120\n"
            f"while not os.path.exists(os.path.join({str(tmp_path)!r}, other)):\n"
            "    time.sleep(0.1)\n    if time.time() > deadline: sys.exit('the other task never started')\n")
    cluster = bundled_cluster(tmp_path, store)
    cluster.run(two_tasks(independent_code=code), runtime_root="minio://mlpipeline/v2/artifacts")
    assert cluster.states == {"A": "COMPLETE", "B": "COMPLETE"}


# --------------------------------------------------------------------------- the step's side


def _reachable(*addresses: str):
    """A cluster's answers to the step's connection attempts: these ``name:port`` accept, others refuse."""
    def reach(address: str) -> str:
        if address not in addresses:
            raise ConnectionRefusedError(f"{address}: connection refused")
        return f"10.0.0.{addresses.index(address) + 7}:{address.rsplit(':', 1)[1]}"
    return reach


@pytest.mark.parametrize("version, environ, expected", [
    # standalone (kubeflow namespace): the Services' env
    ("2.3.0", {"MINIO_SERVICE_SERVICE_HOST": "10.0.0.7", "MINIO_SERVICE_SERVICE_PORT": "9000"},
     "http://10.0.0.7:9000"),
    ("2.17.0", {"SEAWEEDFS_SERVICE_HOST": "10.0.0.8", "SEAWEEDFS_SERVICE_PORT": "8111",
                "SEAWEEDFS_SERVICE_PORT_HTTP_S3_COMPAT": "9000"}, "http://10.0.0.8:9000"),
    # a profile namespace (multi-user): no env; what each version's Services answer
    ("2.5.0", {}, "minio-service"),
    ("2.15.0", {}, "minio-service"),  # was seaweedfs.kubeflow:9000, a port the 2.15 Service does not have
    ("2.17.0", {}, "seaweedfs"),
])
def test_the_step_finds_the_bundled_store_of_each_version(version, environ, expected):
    from support.kfp_backends import BACKENDS

    answering = [f"{name}.kubeflow:{port}" for name, ports in BACKENDS[version].services("x:1").items()
                 for _, port, address in ports if address and port == 9000]
    found = bundled_store.endpoint(environ, reach=_reachable(*answering))
    if expected.startswith("http"):
        assert found == expected
    else:  # the address the Service's name resolved to, on the port the launcher of that version uses
        assert found == f"http://10.0.0.{answering.index(f'{expected}.kubeflow:9000') + 7}:9000"
        assert BACKENDS[version].launcher_store_endpoint({}) == f"{expected}.kubeflow:9000"


def test_no_bundled_store_is_a_paragraph():
    with pytest.raises(KubeflowConfigError, match="reaches none of its Services: seaweedfs.kubeflow:9000") as caught:
        bundled_store.endpoint({}, reach=_reachable())
    assert "--s3-endpoint" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(KubeflowConfigError, match="AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY is not set"):
        bundled_store.configure_environment({"S3_ENDPOINT": "http://10.0.0.7:9000"})


def test_the_launchers_own_outputs_never_reach_tfx():
    """KFP 2.5+ adds ``executor-logs`` (system.Artifact) to every task; TFX 1.16 cannot import that type."""
    from stackenv.compat import drop_launcher_managed_outputs

    executor_input = {"outputs": {"artifacts": {
        "examples": {"artifacts": [{"type": {"instanceSchema": "title: tfx.Examples\ntype: object\n"}}]},
        "executor-logs": {"artifacts": [{"name": "executor-logs", "type": {"schemaTitle": "system.Artifact"}}]}}}}
    assert drop_launcher_managed_outputs(executor_input) == ["executor-logs"]
    assert list(executor_input["outputs"]["artifacts"]) == ["examples"]


def test_the_step_reads_s3_forms_and_hands_back_the_original_uris(tmp_path):
    root = "minio://mlpipeline/v2/artifacts/p/run"
    executor_input = {
        "inputs": {"artifacts": {"model": {"artifacts": [{"uri": f"{root}/Trainer/model", "metadata": {}}]}}},
        "outputs": {"artifacts": {"blessing": {"artifacts": [{"uri": f"{root}/Evaluator/blessing"}]}},
                    "outputFile": str(tmp_path / "out.json")}}
    readable = bundled_store.to_readable(executor_input)
    assert readable["inputs"]["artifacts"]["model"]["artifacts"][0]["uri"] == \
        "s3://mlpipeline/v2/artifacts/p/run/Trainer/model"
    written = {"artifacts": {"blessing": {"artifacts": [{
        "uri": "s3://mlpipeline/v2/artifacts/p/run/Evaluator/blessing",
        "metadata": {"current_model": "s3://mlpipeline/v2/artifacts/p/run/Trainer/model/Format-Serving",
                     "baseline_model_uri": "s3://mlpipeline/serving/cnn/1",
                     "elsewhere": "s3://other-bucket/x"}}]}}}
    (tmp_path / "out.json").write_text(json.dumps(written))
    assert bundled_store.restore_output_uris(str(tmp_path / "out.json"), executor_input)
    back = json.loads((tmp_path / "out.json").read_text())["artifacts"]["blessing"]["artifacts"][0]
    assert back["uri"] == f"{root}/Evaluator/blessing"
    # The served model is no artifact of the run but an object of the same store: outside the step,
    # s3://mlpipeline would be opened on AWS's endpoint, so it goes back as minio:// too.
    assert back["metadata"] == {"current_model": f"{root}/Trainer/model/Format-Serving",
                                "baseline_model_uri": "minio://mlpipeline/serving/cnn/1",
                                "elsewhere": "s3://other-bucket/x"}


def test_a_store_that_refuses_the_step_is_one_paragraph_at_its_start(tmp_path):
    """Wrong keys, a prefix the profile's keys may not touch, nothing listening: bounded, one paragraph each."""
    from support.s3_server import _free_port, policed_s3_server

    executor_input = {"outputs": {"artifacts": {"examples": {"artifacts": [
        {"uri": "minio://mlpipeline/tfx/p/run/ImportExampleGen/examples"}]}}}}
    with policed_s3_server(BUCKET, {"team-a": ["private-artifacts/team-a/"]}) as (address, keys):
        url = f"http://{address}"
        wrong = {"AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "minio123"}
        with pytest.raises(KubeflowConfigError, match="refuses the keys the step has \\(InvalidAccessKeyId\\)"):
            bundled_store.check_access(url, executor_input, wrong)
        admin = {"AWS_ACCESS_KEY_ID": keys["admin"]["accesskey"], "AWS_SECRET_ACCESS_KEY": keys["admin"]["secretkey"]}
        bundled_store.check_access(url, executor_input, admin)  # the store's own keys: anywhere
    with pytest.raises(KubeflowConfigError, match="did not answer within") as caught:
        bundled_store.check_access(f"http://127.0.0.1:{_free_port()}", executor_input, wrong)
    assert "NetworkPolicy" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("version, uploaded", [("2.15.0", False), ("2.17.0", True)])
def test_a_failed_steps_log_is_uploaded_from_2_16(tmp_path, store, version, uploaded):
    """launcher_v2.go uploadOutputArtifacts :678-684@2.16.0: a failed command's executor-logs are uploaded and
    recorded; before, nothing of a failed step was. The log holds the step's own stderr."""
    from support.kfp_backends import BACKENDS

    spec = two_tasks(independent_code="import sys; sys.stderr.write('step %s broke' % sys.argv[1]); sys.exit(3)")
    cluster = Cluster(str(tmp_path), store_address=store, backend=BACKENDS[version], secrets=BUNDLED_SECRET)
    with pytest.raises(TaskFailed, match="exit status 3"):
        cluster.run(spec, run_id=f"fail-{version}", runtime_root="minio://mlpipeline/v2/artifacts",
                    platform=bundled_keys_env(), parameters={})
    assert bool(cluster.failed_logs) == uploaded
    for uri in cluster.failed_logs.values():
        assert uri.endswith("/executor-logs-0")  # 2.17.0: the retry index
        key = uri.split("://", 1)[1].split("/", 1)[1]
        body = s3_client(store).get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        assert body.startswith("step ") and body.endswith(" broke")

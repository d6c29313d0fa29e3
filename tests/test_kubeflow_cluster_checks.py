"""``deploy``'s cluster-side pre-flight (pipeline/kubeflow/cluster_checks.py) against real packages.

The packages are what ``compile`` writes (KFP's bundled store with ``--trainer-workers``; an ``s3://``
root on another endpoint with its ``kfp-launcher`` manifest); KFP is the fake REST API of
test_kubeflow_deploy.py and the cluster the fake Kubernetes API server of
tests/support/k8s_tfjob_api.py (404 ``Status`` objects as the real server sends them). Whether a
``kfp-launcher`` ConfigMap opens the root as the compiled manifest does is decided by the launcher
emulation of tests/support/kfp_launcher.py (read from the backend's config/s3.go), not by the code
under test.
"""
import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import stackenv  # noqa: F401  (before TFX)

import kfp
import pytest
import yaml
from support.k8s_tfjob_api import TFJobApiServer
from support.kfp_launcher import store_session_info
from test_kubeflow_deploy import FakeKfp, _serving

from pipeline.kubeflow.deploy import DeployError, deploy

IMAGE = "registry.example.com/tfx-project:test"
BUNDLED_SECRET = {"accesskey": "minio", "secretkey": "minio123"}
S3_ENDPOINT, S3_SECRET = "http://minio.storage.svc:9000", "s3-creds"
PROFILE_CONTROLLER = {  # what metacontroller writes on a DecoratorController's attachment (decorator controller.go)
    "annotations": {"metacontroller.k8s.io/decorator-controller": "kubeflow-pipelines-profile-controller"},
    "ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "team-a", "controller": True,
                         "blockOwnerDeletion": True, "uid": "0f0e8b4e-8f0c-4b8e-9c55-1d2f3a4b5c6d"}]}


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No kfp context, kubeconfig or in-cluster token of this machine leaks into a test."""
    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for name in ("KF_PIPELINES_SA_TOKEN_PATH", "KF_PIPELINES_UI_ENDPOINT", "KF_PIPELINES_ENDPOINT", "KUBECONFIG",
                 "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/.kube/config


def _compile(folder: Path, root: str, **settings) -> tuple[Path, str]:
    """(package, the run's root) as `python -m pipeline compile` writes them (pipeline/cli.py command_compile)."""
    from pipeline.config import PipelineConfig
    from pipeline.kubeflow.compile import compile_pipeline, kfp_pipeline_root
    from pipeline.kubeflow.launcher_config import write_launcher_configmap
    from pipeline.kubeflow.platform import StepSettings

    workers = settings.pop("trainer_workers", 1)
    config = PipelineConfig(model="cnn", output_dir=root, trainer_workers=workers)
    package = compile_pipeline(config, None, IMAGE, str(folder / "p.yaml"), StepSettings(**settings))
    if root.startswith("s3://"):
        write_launcher_configmap(package, kfp_pipeline_root(config), settings["s3_endpoint"], settings["s3_secret"])
    return Path(package), kfp_pipeline_root(config)


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """KFP's own store (the secret mlpipeline-minio-artifact as env) and a Trainer that launches a training job."""
    return _compile(tmp_path_factory.mktemp("bundled"), "minio://mlpipeline/tfx", trainer_workers=2)


@pytest.fixture(scope="module")
def on_s3(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    return _compile(tmp_path_factory.mktemp("s3"), "s3://data/tfx", s3_endpoint=S3_ENDPOINT, s3_secret=S3_SECRET)


@pytest.fixture
def kfp_server() -> Iterator[FakeKfp]:
    with _serving(FakeKfp()) as fake:
        yield fake


@contextlib.contextmanager
def _cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs) -> Iterator[TFJobApiServer]:
    (tmp_path / "pods").mkdir(exist_ok=True)
    with TFJobApiServer(tmp_path / "pods", **kwargs) as api:
        monkeypatch.setenv("KUBECONFIG", api.kubeconfig(tmp_path / "kubeconfig", "default"))
        yield api


def _refused(kfp_server: FakeKfp, package: Path, **kwargs) -> str:
    with pytest.raises(DeployError) as caught:
        deploy(kfp_server.url, str(package), run=True, timeout=5, **kwargs)
    assert not kfp_server.sent("POST", "/pipelines/upload") and not kfp_server.runs  # refused before anything
    return str(caught.value)


# --------------------------------------------------------------------------- secrets and the training job


def test_a_missing_secret_is_refused_in_the_runs_namespace(kfp_server, bundled, tmp_path, monkeypatch) -> None:
    package, _ = bundled
    with _cluster(tmp_path, monkeypatch, secrets={("elsewhere", "mlpipeline-minio-artifact"): BUNDLED_SECRET}) as api:
        message = _refused(kfp_server, package)
        assert "'mlpipeline-minio-artifact'" in message and "namespace 'kubeflow'" in message
        assert "accesskey, secretkey" in message and "CreateContainerConfigError" in message
        assert "pipelines.kubeflow.org/enabled=true" in message and "kubectl create secret generic" in message
        assert api.reads[0] == "/api/v1/namespaces/kubeflow/secrets/mlpipeline-minio-artifact"

        api.secrets[("kubeflow", "mlpipeline-minio-artifact")] = {"accesskey": "minio"}
        message = _refused(kfp_server, package)
        assert "has no key secretkey (it has: accesskey)" in message

        api.secrets[("kubeflow", "mlpipeline-minio-artifact")] = BUNDLED_SECRET
        result = deploy(kfp_server.url, str(package), run=True, timeout=5)
        assert result.run_id and kfp_server.runs


def test_a_multi_user_run_is_checked_in_the_profile_namespace(kfp_server, bundled, tmp_path, monkeypatch) -> None:
    package, _ = bundled
    kfp_server.multi_user, kfp_server.front_door, kfp_server.dashboard = True, "token", True
    kfp_server.tokens, kfp_server.profiles = {"t": "user@example.com"}, {"user@example.com": {"team-a": "owner"}}
    with _cluster(tmp_path, monkeypatch, secrets={("kubeflow", "mlpipeline-minio-artifact"): BUNDLED_SECRET}) as api:
        message = _refused(kfp_server, package, existing_token="t")
        assert "namespace 'team-a'" in message
        assert "/api/v1/namespaces/team-a/secrets/mlpipeline-minio-artifact" in api.reads


@pytest.mark.parametrize("apis, runtimes, expected, fix", [
    ((), None, "has no training-job resource (no kubeflow.org/v1; no trainer.kubeflow.org/v1alpha1)",
     "compile without --trainer-workers / --tune-workers"),
    (("trainjob",), {}, "has no ClusterTrainingRuntime 'tfx-tensorflow'",
     "`kubectl apply -f kubeflow/trainjob-runtime.yaml`"),
])
def test_a_training_job_the_cluster_cannot_run_is_refused(kfp_server, bundled, tmp_path, monkeypatch, apis, runtimes,
                                                          expected, fix) -> None:
    package, _ = bundled
    with _cluster(tmp_path, monkeypatch, apis=apis, runtimes=runtimes,
                  secrets={"mlpipeline-minio-artifact": BUNDLED_SECRET}):
        message = _refused(kfp_server, package)
    assert expected in message and fix in message


@pytest.mark.parametrize("apis", [("tfjob",), ("trainjob",), ("tfjob", "trainjob")])
def test_a_cluster_with_a_training_job_runs(kfp_server, bundled, tmp_path, monkeypatch, apis) -> None:
    package, _ = bundled
    with _cluster(tmp_path, monkeypatch, apis=apis, secrets={"mlpipeline-minio-artifact": BUNDLED_SECRET}):
        assert deploy(kfp_server.url, str(package), run=True, timeout=5).run_id


# --------------------------------------------------------------------------- the kfp-launcher providers entry


def _manifest_data(package: Path) -> dict:
    return yaml.safe_load(package.with_suffix(".kfp-launcher.yaml").read_text())["data"]


def _providers(endpoint: str, secret: str = S3_SECRET, overrides: list | None = None) -> str:
    entry = {"default": {"endpoint": endpoint, "region": "us-east-1", "disableSSL": endpoint.startswith("http:"),
                         "credentials": {"fromEnv": False, "secretRef": {
                             "secretName": secret, "accessKeyKey": "accesskey", "secretKeyKey": "secretkey"}}}}
    if overrides:
        entry["Overrides"] = overrides
    return yaml.safe_dump({"s3": entry})


CONFIGMAPS = {
    "as compiled": None,  # the manifest's own data
    "another endpoint": {"providers": _providers("https://s3.amazonaws.com")},
    "an override for the bucket": {"providers": _providers("https://s3.amazonaws.com", overrides=[{
        "bucketName": "data", "keyPrefix": "tfx", "endpoint": S3_ENDPOINT, "region": "us-east-1", "disableSSL": True,
        "credentials": {"fromEnv": False, "secretRef": {"secretName": S3_SECRET, "accessKeyKey": "accesskey",
                                                        "secretKeyKey": "secretkey"}}}])},
    "an override for another bucket": {"providers": _providers("https://s3.amazonaws.com", overrides=[{
        "bucketName": "other", "endpoint": S3_ENDPOINT, "credentials": {"fromEnv": True}}])},
    "no providers": {"defaultPipelineRoot": "s3://data/tfx"},
    "another secret": {"providers": _providers(S3_ENDPOINT, secret="other-creds")},
}


@pytest.mark.parametrize("case", sorted(CONFIGMAPS))
def test_the_launcher_configmap_must_open_the_root_as_compiled(kfp_server, on_s3, tmp_path, monkeypatch,
                                                               case) -> None:
    package, root = on_s3
    data = CONFIGMAPS[case] or _manifest_data(package)
    # The oracle: the emulated launcher opens the root with this ConfigMap as with the compiled one, or not.
    session_fields = ("endpoint", "region", "disableSSL", "fromEnv", "secretName", "accessKeyKey", "secretKeyKey")
    same = [store_session_info(root, d)["Params"].get(f) for f in session_fields
            for d in (data, _manifest_data(package))]
    opens_as_compiled = same[0::2] == same[1::2]
    assert case not in ("as compiled", "an override for the bucket") or opens_as_compiled  # the table's own sanity
    with _cluster(tmp_path, monkeypatch, secrets={S3_SECRET: {"accesskey": "a", "secretkey": "s"}},
                  configmaps={("team-a", "kfp-launcher"): {"data": data}}) as api:
        if opens_as_compiled:
            assert deploy(kfp_server.url, str(package), run=True, namespace="team-a", timeout=5).run_id
        else:
            message = _refused(kfp_server, package, namespace="team-a")
            assert "kfp-launcher ConfigMap of namespace 'team-a'" in message and root in message
            assert "kubectl edit configmap kfp-launcher -n team-a" in message
            assert f"set metadata.namespace to team-a in {package.with_suffix('.kfp-launcher.yaml')}" in message
        assert "/api/v1/namespaces/team-a/configmaps/kfp-launcher" in api.reads


def test_a_missing_launcher_configmap_names_the_file_to_apply(kfp_server, on_s3, tmp_path, monkeypatch) -> None:
    package, root = on_s3
    with _cluster(tmp_path, monkeypatch, secrets={S3_SECRET: {"accesskey": "a", "secretkey": "s"}}):
        message = _refused(kfp_server, package)
    assert "namespace 'kubeflow'" in message and "has no kfp-launcher ConfigMap" in message
    assert f"`kubectl apply -f {package.with_suffix('.kfp-launcher.yaml')}`" in message
    assert "AWS SDK's default credential chain" in message


def test_a_profile_controller_owned_configmap_is_for_the_admin(kfp_server, on_s3, tmp_path, monkeypatch) -> None:
    package, _ = on_s3
    owned = {"metadata": PROFILE_CONTROLLER,
             "data": {"defaultPipelineRoot": "minio://mlpipeline/private-artifacts/team-a/v2/artifacts"}}
    with _cluster(tmp_path, monkeypatch, secrets={S3_SECRET: {"accesskey": "a", "secretkey": "s"}},
                  configmaps={("team-a", "kfp-launcher"): owned}):
        message = _refused(kfp_server, package, namespace="team-a")
    assert "belongs to KFP's profile controller" in message and "ownerReference Namespace/team-a" in message
    assert "Kubeflow administrator" in message and "kubeflow-pipelines-profile-controller-code" in message
    assert "kubectl edit" not in message


# --------------------------------------------------------------------------- when the cluster cannot be asked


def test_without_kubernetes_credentials_the_checks_are_skipped_once(kfp_server, bundled, caplog) -> None:
    package, _ = bundled
    with caplog.at_level(logging.WARNING):
        result = deploy(kfp_server.url, str(package), run=True, timeout=5)
    assert result.run_id
    [skipped] = [r.getMessage() for r in caplog.records if "pre-flight" in r.getMessage().lower()]
    assert "Cluster-side pre-flight checks skipped: this machine has no Kubernetes credentials" in skipped
    assert "mlpipeline-minio-artifact" in skipped and "--skip-cluster-checks" in skipped


@pytest.mark.parametrize("trouble, expected", [
    ("expired token", "rejected this machine's credentials (HTTP 401"),
    ("server gone", "could not be reached or did not answer within 2 s (NewConnectionError)"),
])
def test_a_cluster_that_rejects_or_does_not_answer_skips_the_checks(kfp_server, bundled, tmp_path, monkeypatch,
                                                                     caplog, trouble, expected) -> None:
    package, _ = bundled

    def deploy_and_warn() -> str:
        with caplog.at_level(logging.WARNING):
            assert deploy(kfp_server.url, str(package), run=True, timeout=2).run_id
        [skipped] = [r.getMessage() for r in caplog.records if "checks skipped" in r.getMessage()]
        return skipped

    with _cluster(tmp_path, monkeypatch):
        if trouble == "expired token":
            kubeconfig = Path(os.environ["KUBECONFIG"])
            config = yaml.safe_load(kubeconfig.read_text())
            config["users"][0]["user"]["token"] = "expired"
            kubeconfig.write_text(yaml.safe_dump(config))
            assert expected in deploy_and_warn()
    if trouble == "server gone":  # its port now refuses connections
        assert expected in deploy_and_warn()


def test_cli_skip_cluster_checks_and_upload_only_read_nothing(kfp_server, bundled, tmp_path, monkeypatch) -> None:
    from test_kubeflow_deploy import _cli

    package, _ = bundled
    with _cluster(tmp_path, monkeypatch) as api:  # no secret: a checked run would be refused
        code, _, err = _cli("--host", kfp_server.url, "--package", package, "--run")
        assert code != 0 and "'mlpipeline-minio-artifact'" in err and not kfp_server.runs
        code, out, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--skip-cluster-checks")
        assert code == 0, err
        assert "Started run" in out and "skipped" not in err
        reads = list(api.reads)
        code, _, err = _cli("--host", kfp_server.url, "--package", package)  # an upload starts no pod
        assert code == 0, err
        assert api.reads == reads and len(kfp_server.runs) == 1


def test_a_root_the_profiles_own_keys_cannot_write_is_refused(kfp_server, tmp_path, monkeypatch) -> None:
    """KFP 2.15+ profile namespaces: the kfp-launcher root the profile controller writes says the keys are the
    profile's own, allowed under private-artifacts/<ns>/, private/<ns>/, shared/, artifacts/ only
    (pipelines-profile-controller/sync.py:181 and :353-373@2.15.0)."""
    owned = {"metadata": PROFILE_CONTROLLER,
             "data": {"defaultPipelineRoot": "minio://mlpipeline/private-artifacts/team-a/v2/artifacts"}}
    outside, _ = _compile(tmp_path / "outside", "minio://mlpipeline/tfx")
    inside, _ = _compile(tmp_path / "inside", "minio://mlpipeline/private-artifacts/team-a/tfx")
    with _cluster(tmp_path, monkeypatch, secrets={("team-a", "mlpipeline-minio-artifact"): BUNDLED_SECRET},
                  configmaps={("team-a", "kfp-launcher"): owned}) as api:
        message = _refused(kfp_server, outside, namespace="team-a")
        assert "minio://mlpipeline/private-artifacts/team-a/v2/artifacts" in message
        assert "mlpipeline/private-artifacts/team-a/, mlpipeline/private/team-a/, mlpipeline/shared/" in message
        assert "--pipeline-root minio://mlpipeline/private-artifacts/team-a/tfx" in message
        assert "/api/v1/namespaces/team-a/configmaps/kfp-launcher" in api.reads
        assert deploy(kfp_server.url, str(inside), run=True, namespace="team-a", timeout=5).run_id
        # MinIO installs (up to 2.14) write no such root: the store's own keys, any key of the bucket
        api.configmaps[("team-a", "kfp-launcher")] = {"data": {"defaultPipelineRoot": "minio://mlpipeline/v2/artifacts"}}
        assert deploy(kfp_server.url, str(outside), run=True, namespace="team-a", timeout=5,
                      pipeline_name="on-minio").run_id

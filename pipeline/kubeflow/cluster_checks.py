"""Pre-flight checks against the Kubernetes API of the cluster a run starts in: what KFP's API cannot see.

KFP accepts a run whatever its namespace holds; what is missing shows only once the pods start, as a
pod that never leaves Pending or a step that fails after everything before it ran. So before ``deploy``
uploads anything for a run or a schedule, it reads the few objects the package depends on and refuses
with one paragraph per problem:

- **secrets** the package's Kubernetes platform spec names (``secretAsEnv``, ``secretAsVolume``: from
  ``--secret-env``, ``--secret-volume``, ``--s3-secret``, and ``mlpipeline-minio-artifact`` on KFP's
  bundled store): a missing secret, or a key that an env var reads and the secret lacks, keeps every
  step's pod in CreateContainerConfigError (a mounted one: ContainerCreating, FailedMount);
- **the training job** of a ``--trainer-workers``/``--tune-workers`` package: the cluster must serve a
  TFJob or a TrainJob (pipeline/kubeflow/training/kube_api.py ``detect``), and for a TrainJob have this
  project's ClusterTrainingRuntime, or the Trainer step fails after the steps before it ran;
- **the kfp-launcher providers entry** of an ``s3://`` root: KFP's launcher opens it with the
  ``providers`` of the run namespace's ``kfp-launcher`` ConfigMap (backend src/v2/config/env.go
  FromConfigMap, config/s3.go), else with AWS's default chain against AWS; the namespace's entry must
  open the root as the one ``compile`` wrote beside the package does (pipeline/kubeflow/launcher_config.py).
  From KFP 2.15 the profile controller owns each profile's ``kfp-launcher`` (a metacontroller
  DecoratorController attachment: a controller ownerReference to the Namespace and the annotation
  ``metacontroller.k8s.io/decorator-controller``; manifests .../pipelines-profile-controller/sync.py),
  so there the fix is the administrator's.

Each read is bounded by deploy's ``timeout``, without retries, through kube_api's client (in-cluster,
else the kubeconfig). Without Kubernetes credentials on the deploying machine, or with a cluster that
does not answer or rejects them, the checks are skipped with one warning that says why: KFP itself
needs none of this, and deploying through a port-forward from a laptop is common. The run's namespace
is the profile namespace on multi-user Kubeflow, else ``--namespace`` or ``kubeflow`` (where standalone
KFP starts its pods).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from pipeline.kubeflow import profile_store
from pipeline.kubeflow.connection import DeployError
from pipeline.kubeflow.http_limits import deadline
from pipeline.kubeflow.launcher_config import NAME as LAUNCHER_CONFIGMAP
from pipeline.kubeflow.launcher_config import SESSION_FIELDS, launcher_configmap_path, s3_session
from pipeline.kubeflow.training import kube_api
from pipeline.kubeflow.training.trainer_launcher import TEMPLATE_ENV
from pipeline.kubeflow.training.trainjob import RUNTIME, RUNTIME_FILE

log = logging.getLogger(__name__)

STANDALONE_NAMESPACE = "kubeflow"
PROFILE_CONTROLLER_ANNOTATION = "metacontroller.k8s.io/decorator-controller"
PROFILE_CONTROLLER_CODE = "kubeflow-pipelines-profile-controller-code"
OTHER_CLUSTER_HINT = ("If {server} is not the cluster Kubeflow Pipelines runs on, point $KUBECONFIG at that "
                      "cluster's kubeconfig, or pass --skip-cluster-checks.")


@dataclasses.dataclass(frozen=True)
class SecretUse:
    """A secret the steps' pods need: the keys env vars read from it, and whether it is mounted."""

    name: str
    keys: frozenset[str]
    mounted: bool


@dataclasses.dataclass(frozen=True)
class ClusterNeeds:
    """What a run of the package needs from its namespace and cluster, read from the package alone."""

    secrets: tuple[SecretUse, ...]
    training_job: bool
    s3_root: str | None
    launcher_manifest: str
    #: the store URIs of a run on KFP's bundled store (its root, serving dir, data), as text; "" for another root
    bundled_store_text: str = ""

    def __bool__(self) -> bool:
        return bool(self.secrets or self.training_job or self.s3_root or self.bundled_store_text)

    def describe(self) -> str:
        parts = [f"the secret{'s' if len(self.secrets) > 1 else ''} "
                 f"{', '.join(use.name for use in self.secrets)}"] if self.secrets else []
        if self.training_job:
            parts.append("the TFJob or TrainJob the Trainer/Tuner step creates")
        if self.s3_root:
            parts.append(f"the {LAUNCHER_CONFIGMAP} providers entry for {self.s3_root}")
        if self.bundled_store_text:
            parts.append(f"the prefixes the {LAUNCHER_CONFIGMAP} root of a profile allows")
        return "; ".join(parts)


def read_needs(package_path: str, root: str | None) -> ClusterNeeds:
    """Secrets from the platform spec (a second YAML document), a training job from the step env
    ``compile --trainer-workers/--tune-workers`` writes, the s3:// root from the run's root."""
    documents = list(yaml.safe_load_all(Path(package_path).read_text(encoding="utf-8")))
    spec = documents[0]
    platform = next((d for d in documents[1:] if isinstance(d, dict) and "platforms" in d), {})
    executors = (((platform.get("platforms") or {}).get("kubernetes") or {}).get("deploymentSpec") or {}) \
        .get("executors") or {}
    keys: dict[str, set[str]] = {}
    mounted: set[str] = set()
    for config in executors.values():
        for entry in config.get("secretAsEnv") or []:
            if entry.get("secretName") and not entry.get("optional"):
                keys.setdefault(entry["secretName"], set()).update(
                    pair["secretKey"] for pair in entry.get("keyToEnv") or [] if pair.get("secretKey"))
        for entry in config.get("secretAsVolume") or []:
            if entry.get("secretName") and not entry.get("optional"):
                keys.setdefault(entry["secretName"], set())
                mounted.add(entry["secretName"])
    containers = [executor.get("container") or {} for executor in spec["deploymentSpec"]["executors"].values()]
    return ClusterNeeds(
        secrets=tuple(SecretUse(name, frozenset(keys[name]), name in mounted) for name in sorted(keys)),
        training_job=any(env.get("name") == TEMPLATE_ENV for container in containers
                         for env in container.get("env") or []),
        s3_root=root if root and root.startswith("s3://") else None,
        launcher_manifest=launcher_configmap_path(package_path),
        bundled_store_text=json.dumps([root, spec]) if root and root.startswith("minio://") else "")


class Unavailable(Exception):
    """The cluster cannot be asked (no or rejected credentials, no answer): every check is skipped."""


UNCHECKED = object()  # a read the caller may not make (HTTP 403): that check is skipped, the others run


@dataclasses.dataclass
class Cluster:
    """Bounded reads in the run's namespace."""

    core: Any      # kubernetes.client.CoreV1Api
    custom: Any    # kubernetes.client.CustomObjectsApi
    server: str
    namespace: str
    timeout: float

    def read(self, what: str, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)``'s object, bounded by :attr:`timeout`; None when the API answers 404 (the Status NotFound),
        :data:`UNCHECKED` on 403 (said once), :class:`Unavailable` on 401 or no answer."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            with deadline(self.timeout, lambda: Unavailable(
                    f"the Kubernetes API server at {self.server} did not finish answering within {self.timeout:g} s "
                    f"when reading {what} (slow or endless)")):
                return call(*args, _request_timeout=self.timeout)
        except ApiException as error:
            if error.status == 404:
                return None
            if error.status == 403:
                log.warning("Pre-flight: could not check %s in namespace %s (HTTP 403 from %s: your Kubernetes "
                            "credentials may not read it); that check is skipped.", what, self.namespace, self.server)
                return UNCHECKED
            if error.status == 401:
                raise Unavailable(f"the Kubernetes API server at {self.server} rejected this machine's credentials "
                                  "(HTTP 401: an expired token or a kubeconfig for another cluster)") from None
            raise Unavailable(f"the Kubernetes API server at {self.server} answered HTTP {error.status} "
                              f"({error.reason}) when reading {what}") from None
        except HTTPError as error:
            cause = getattr(error, "reason", None) or error  # urllib3's MaxRetryError wraps the first failure
            raise Unavailable(f"the Kubernetes API server at {self.server} could not be reached or did not answer "
                              f"within {self.timeout:g} s ({type(cause).__name__})") from None


@contextlib.contextmanager
def open_cluster(namespace: str, timeout: float, environ: Mapping[str, str] = os.environ,
                 service_account_dir: str = kube_api.SERVICE_ACCOUNT_DIR) -> Iterator[Cluster]:
    """The cluster of this machine's Kubernetes credentials, or :class:`Unavailable` saying why there is none."""
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException

    path = kube_api.kubeconfig_path(environ)
    if not kube_api.in_cluster(environ, service_account_dir) and not os.path.isfile(path):
        where = "$KUBECONFIG" if environ.get("KUBECONFIG") else "the default place"
        raise Unavailable(f"this machine has no Kubernetes credentials (not inside a pod, and no kubeconfig at {path}, "
                          f"{where})")
    try:
        api, _, _ = kube_api.api_client(environ, service_account_dir, retries=0)
    except (ConfigException, OSError, ValueError) as error:
        raise Unavailable(f"the kubeconfig {path} is unusable ({str(error)[:200]})") from None
    with api:
        yield Cluster(client.CoreV1Api(api), client.CustomObjectsApi(api), api.configuration.host, namespace, timeout)


def check_cluster(package_path: str, root: str | None, namespace: str, *, timeout: float,
                  environ: Mapping[str, str] = os.environ,
                  service_account_dir: str = kube_api.SERVICE_ACCOUNT_DIR) -> None:
    """Refuse (DeployError, every problem's paragraph) a run the cluster could not carry out; skip with one
    warning when the cluster cannot be asked; do nothing for a package that needs nothing of it."""
    needs = read_needs(package_path, root)
    if not needs:
        return
    try:
        with open_cluster(namespace, timeout, environ, service_account_dir) as cluster:
            problems = [*secret_problems(cluster, needs), *training_job_problems(cluster, needs),
                        *launcher_problems(cluster, needs), *profile_root_problems(cluster, needs)]
    except Unavailable as why:
        log.warning("Cluster-side pre-flight checks skipped: %s. They check %s in namespace %s; KFP starts the run "
                    "without them, and anything missing shows only in its pods (`kubectl get pods -n %s`). Point "
                    "$KUBECONFIG at the cluster's kubeconfig to have them, or pass --skip-cluster-checks to leave "
                    "them out.", why, needs.describe(), namespace, namespace)
        return
    if problems:
        raise DeployError(" ".join([*problems, OTHER_CLUSTER_HINT.format(server=cluster.server)]))


# --------------------------------------------------------------------------- secrets


def secret_problems(cluster: Cluster, needs: ClusterNeeds) -> list[str]:
    problems = []
    for use in needs.secrets:
        secret = cluster.read(f"secret {use.name}", cluster.core.read_namespaced_secret, use.name, cluster.namespace)
        if secret is UNCHECKED:
            continue
        how = ", ".join(filter(None, [f"as env from its key{'s' if len(use.keys) > 1 else ''} "
                                      f"{', '.join(sorted(use.keys))}" if use.keys else "",
                                      "mounted as files" if use.mounted else ""]))
        if secret is None:
            problems.append(
                f"The package's steps read the Kubernetes secret {use.name!r} ({how}), but the namespace "
                f"{cluster.namespace!r} at {cluster.server} has no such secret (the API answered 404 NotFound), so "
                f"every step's pod would stay in {'CreateContainerConfigError' if use.keys else 'ContainerCreating'} "
                f"and the run would never start. {_create_secret(use, cluster.namespace)}")
            continue
        missing = sorted(use.keys - set((secret.data or {}) | (secret.string_data or {})))
        if missing:
            problems.append(
                f"The Kubernetes secret {use.name!r} in namespace {cluster.namespace!r} has no key "
                f"{', '.join(missing)} (it has: {', '.join(sorted(secret.data or {})) or 'none'}), which the "
                "package's steps read as env, so every step's pod would stay in CreateContainerConfigError "
                f"(\"couldn't find key\"). Add the key (`kubectl edit secret {use.name} -n {cluster.namespace}`), "
                "or recompile with the secret's own key names.")
    return problems


def _create_secret(use: SecretUse, namespace: str) -> str:
    from pipeline.kubeflow import bundled_store

    literals = " ".join(f"--from-literal={key}=..." for key in sorted(use.keys)) or "--from-file=PATH"
    create = f"`kubectl create secret generic {use.name} -n {namespace} {literals}`"
    if use.name == bundled_store.SECRET:
        return (f"It holds the keys of KFP's bundled object store: standalone KFP creates it in its own namespace "
                f"(kubeflow), and on multi-user Kubeflow KFP's profile controller copies it into every profile "
                f"namespace labelled pipelines.kubeflow.org/enabled=true (`kubectl get namespace {namespace} "
                f"--show-labels`); run in such a namespace, or create it: {create}.")
    return f"Create it in that namespace: {create}, or recompile without it."


# --------------------------------------------------------------------------- training job


def training_job_problems(cluster: Cluster, needs: ClusterNeeds) -> list[str]:
    if not needs.training_job:
        return []
    try:
        kind = kube_api.detect(cluster.custom, cluster.server, cluster.timeout, who="deploy's pre-flight check")
    except kube_api.NoTrainingJob as error:
        return [str(error)]
    except kube_api.KubeApiError as error:
        raise Unavailable(str(error).rstrip(".")) from None
    if kind != kube_api.TRAINJOB:
        return []
    runtime = cluster.read(f"ClusterTrainingRuntime {RUNTIME}", cluster.custom.get_cluster_custom_object,
                           kind.group, kind.version, "clustertrainingruntimes", RUNTIME)
    if runtime is not None:
        return []
    return [f"The cluster at {cluster.server} runs training jobs as Kubeflow Trainer v2 TrainJobs, but has no "
            f"ClusterTrainingRuntime {RUNTIME!r}, which the TrainJob of the package's Trainer/Tuner step names: "
            "Trainer's webhook would refuse the job when that step starts, after the steps before it ran. Install "
            f"it once per cluster: `kubectl apply -f {RUNTIME_FILE}`."]


# --------------------------------------------------------------------------- kfp-launcher


def profile_root_problems(cluster: Cluster, needs: ClusterNeeds) -> list[str]:
    """A bundled-store run outside what the profile's own keys allow (pipeline/kubeflow/profile_store.py), read
    from the namespace's ``kfp-launcher`` ``defaultPipelineRoot`` (the 2.15+ profile controller's sets it there)."""
    if not needs.bundled_store_text:
        return []
    configmap = cluster.read(f"ConfigMap {LAUNCHER_CONFIGMAP}", cluster.core.read_namespaced_config_map,
                             LAUNCHER_CONFIGMAP, cluster.namespace)
    if configmap is UNCHECKED or configmap is None:
        return []
    root = (configmap.data or {}).get("defaultPipelineRoot")
    if not profile_store.per_profile_root(root, cluster.namespace):
        return []
    install = (f"The {LAUNCHER_CONFIGMAP} of namespace {cluster.namespace!r} at {cluster.server} has the root {root}, "
               "which KFP's profile controller writes for a profile with keys of its own")
    problem = profile_store.problem(needs.bundled_store_text, cluster.namespace, install)
    return [problem] if problem else []


def launcher_problems(cluster: Cluster, needs: ClusterNeeds) -> list[str]:
    root, manifest = needs.s3_root, needs.launcher_manifest
    if not root:
        return []
    expected = _expected_session(manifest, root)
    configmap = cluster.read(f"ConfigMap {LAUNCHER_CONFIGMAP}", cluster.core.read_namespaced_config_map,
                             LAUNCHER_CONFIGMAP, cluster.namespace)
    if configmap is UNCHECKED:
        return []
    where = f"namespace {cluster.namespace!r} at {cluster.server}"
    opens = (f"KFP's launcher opens the run's s3:// root {root} with the providers entry of the ConfigMap "
             f"{LAUNCHER_CONFIGMAP} in the run's namespace, else with the AWS SDK's default credential chain "
             "against AWS (backend src/v2/config/s3.go), so the first step with an input would fail")
    if configmap is None:
        return [f"{opens}, and {where} has no {LAUNCHER_CONFIGMAP} ConfigMap. Apply the entry `compile` wrote "
                f"beside the package: {_apply(manifest, cluster.namespace)}."]
    try:
        actual = s3_session((configmap.data or {}).get("providers"), root)
    except ValueError as error:
        found = f"a providers entry the launcher cannot read ({error})"
    else:
        if actual is not None and (expected is None or actual == expected):
            return []
        found = "no s3 providers entry" if actual is None else "a providers entry that opens it differently: " + \
            ", ".join(f"{field} {actual.get(field)!r} instead of {expected.get(field)!r}" for field in SESSION_FIELDS
                      if expected is not None and actual.get(field) != expected.get(field))
    owner = _profile_controller(configmap)
    if owner:
        return [f"{opens}; the {LAUNCHER_CONFIGMAP} ConfigMap of {where} has {found}, and it belongs to KFP's "
                f"profile controller ({owner}), which re-creates it from its own template: a change made there by "
                "hand is lost. A Kubeflow administrator must add the providers entry of "
                f"{manifest} to the {LAUNCHER_CONFIGMAP} that the profile controller writes (its sync.py, in the "
                f"ConfigMap {PROFILE_CONTROLLER_CODE} of the kubeflow namespace), then delete this namespace's "
                f"{LAUNCHER_CONFIGMAP} so that the controller re-creates it (its update strategy is OnDelete)."]
    return [f"{opens}; the {LAUNCHER_CONFIGMAP} ConfigMap of {where} has {found}. Merge the providers entry of "
            f"{manifest} into it (`kubectl edit configmap {LAUNCHER_CONFIGMAP} -n {cluster.namespace}`), or replace "
            f"it with that file (it sets defaultPipelineRoot too): {_apply(manifest, cluster.namespace)}."]


def _expected_session(manifest: str, root: str) -> dict[str, str] | None:
    """The session the manifest ``compile`` wrote opens the root with; None when it is gone or unreadable
    (then any s3 providers entry is accepted)."""
    try:
        with open(manifest, encoding="utf-8") as handle:
            documents = [d for d in yaml.safe_load_all(handle) if isinstance(d, dict)]
        return s3_session(((documents[0] if documents else {}).get("data") or {}).get("providers"), root)
    except (OSError, ValueError, yaml.YAMLError):
        log.warning("Pre-flight: %s (what `compile` writes beside an s3:// package) is missing or unreadable, so "
                    "any s3 providers entry of the %s ConfigMap is taken as right.", manifest, LAUNCHER_CONFIGMAP)
        return None


def _apply(manifest: str, namespace: str) -> str:
    """How to apply the manifest (written for the kubeflow namespace) in ``namespace``."""
    if namespace == STANDALONE_NAMESPACE:
        return f"`kubectl apply -f {manifest}`"
    return f"set metadata.namespace to {namespace} in {manifest}, then `kubectl apply -f {manifest}`"


def _profile_controller(configmap: Any) -> str:
    """Who controls the ConfigMap, if someone does (an ownerReference or metacontroller's annotation)."""
    metadata = configmap.metadata
    annotation = (metadata.annotations or {}).get(PROFILE_CONTROLLER_ANNOTATION)
    owners = [f"{ref.kind}/{ref.name}" for ref in metadata.owner_references or [] if ref.controller]
    parts = ([f"annotation {PROFILE_CONTROLLER_ANNOTATION}={annotation}"] if annotation else []) + \
        ([f"ownerReference {', '.join(owners)}"] if owners else [])
    return "; ".join(parts)

"""The Kubernetes API as the Trainer and Tuner steps' job launcher sees it: training jobs in one namespace.

Why the ``kubernetes`` client (already a dependency of kfp) and not raw HTTP: it reads every
kubeconfig form (tokens, client certificates, exec plugins) and the in-cluster service-account
token and CA. Inside a KFP pod the step runs as the run's service account: its token and
namespace come from ``/var/run/secrets/kubernetes.io/serviceaccount``; elsewhere ``$KUBECONFIG``
(or ``~/.kube/config``) and its current context's namespace. Every call is bounded
(``REQUEST_TIMEOUT_S``), and every refusal becomes one paragraph saying what to apply or check.

Which job: :func:`detect` asks the API server's discovery (``GET /apis/<group>/<version>``, open
to every authenticated user through the ``system:discovery`` role) which of the two kinds it
serves: the Training Operator's ``TFJob`` (kubeflow.org/v1, training-operator v1.x) or Kubeflow
Trainer v2's ``TrainJob`` (trainer.kubeflow.org/v1alpha1); a cluster with both gets the TFJob
(TensorFlow natively, ``TF_CONFIG`` from the operator), one with neither a paragraph.
"""
from __future__ import annotations

import base64
import dataclasses
import json
import os
from typing import Any

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "tfjobs"
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
REQUEST_TIMEOUT_S = 30
RBAC_FILE = "kubeflow/tfjob-rbac.yaml"
RUNTIME_FILE = "kubeflow/trainjob-runtime.yaml"


@dataclasses.dataclass(frozen=True)
class JobKind:
    """A training-job resource: where the API serves it and which condition means done."""

    kind: str
    group: str
    version: str
    plural: str
    succeeded: str          # the condition type of a finished job
    installs: str           # what provides it, for the paragraphs


TFJOB = JobKind("TFJob", GROUP, VERSION, PLURAL, "Succeeded", "the Kubeflow Training Operator v1.x")
TRAINJOB = JobKind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs", "Complete",
                   "Kubeflow Trainer v2 with the runtime kubeflow/trainjob-runtime.yaml")
KINDS = (TFJOB, TRAINJOB)


class KubeApiError(ProjectError):
    """The Kubernetes API refused or could not be reached; the Trainer step stops."""

    exit_code = EXIT_PIPELINE_FAILED


class NoTrainingJob(KubeApiError):
    """The cluster serves neither training-job kind: what ``deploy``'s pre-flight refuses, where other
    refusals of the discovery (credentials, reachability) only skip its cluster checks."""


def _service_account(token: str) -> str | None:
    """The service account a token belongs to (its JWT ``sub``: system:serviceaccount:NS:NAME)."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError):
        return None
    parts = str(claims.get("sub", "")).split(":")
    return parts[3] if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"] else None


@dataclasses.dataclass
class TrainingJobApi:
    """Create/get/delete of one job ``kind`` in ``namespace`` (``service_account``: who the launcher runs as)."""

    client: Any              # kubernetes.client.CustomObjectsApi (the kubernetes package is untyped)
    namespace: str
    service_account: str | None
    server: str
    kind: JobKind = TFJOB

    def _call(self, verb: str, name: str, call, tolerate: int | None = None):
        """``call()``; an HTTP ``tolerate`` status returns None, anything else refused is a KubeApiError."""
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            return call()
        except ApiException as error:
            if error.status == tolerate:
                return None
            raise KubeApiError(self._refusal(verb, name, error)) from None
        except HTTPError as error:
            raise KubeApiError(
                f"The Trainer step could not reach the Kubernetes API server at {self.server} to {verb} "
                f"{self.kind.kind} {self.namespace}/{name} ({type(error).__name__}: {str(error)[:200]}). Inside "
                "Kubeflow this is the in-cluster address (KUBERNETES_SERVICE_HOST); elsewhere check the server in "
                "$KUBECONFIG.") from None

    def _refusal(self, verb: str, name: str, error) -> str:
        try:
            message = json.loads(error.body or "{}").get("message") or error.reason
        except ValueError:
            message = error.reason
        where = f"{self.kind.kind} {self.namespace}/{name}"
        if error.status == 403 and "admission webhook" in str(message):
            # Trainer v2's webhook denies a TrainJob whose runtime is not installed (HTTP 403 from
            # controller-runtime's admission.Denied; runtime/core/clustertrainingruntime.go ValidateObjects).
            missing_runtime = "must be created before the TrainJob is created" in str(message)
            fix = (f"install the project's runtime once per cluster: `kubectl apply -f {RUNTIME_FILE}`"
                   if missing_runtime else "recompile with this project's `compile`, or report it with this message")
            return f"The Kubernetes API server refused to {verb} {where}: {message}. To fix it, {fix}."
        if error.status == 403:
            who = f"service account {self.service_account!r}" if self.service_account else "these credentials"
            return (f"The Kubernetes API server refused to {verb} {where} for {who}: {message}. The Trainer or Tuner "
                    f"step (compile --trainer-workers / --tune-workers) needs create, get and delete on "
                    f"{self.kind.plural}.{self.kind.group} in the run's "
                    f"namespace: edit the namespace and service account in {RBAC_FILE} and apply it with "
                    f"`kubectl apply -f {RBAC_FILE}`.")
        if error.status == 401:
            return (f"The Kubernetes API server at {self.server} rejected the credentials of the Trainer step "
                    f"({message}) while trying to {verb} {where}: the service-account token (or the kubeconfig "
                    "user) is invalid or expired.")
        if error.status == 404 and verb == "create":
            return (f"The Kubernetes API server at {self.server} has no {self.kind.kind} resource ({message}): "
                    f"{self.kind.installs} is not installed in this cluster (`kubectl get crd "
                    f"{self.kind.plural}.{self.kind.group}`). Install it, or compile without --trainer-workers / "
                    "--tune-workers to run in the step's own pod.")
        if error.status == 404:
            return (f"{where} disappeared while the Trainer step followed it ({message}): someone deleted it "
                    f"(`kubectl delete {self.kind.kind.lower()}`) or a cleanup removed it. Nothing was trained for "
                    "this run; run the pipeline again.")
        return (f"The Kubernetes API server refused to {verb} {where} (HTTP {error.status}): {message}. "
                "Recompile with this project's `compile`, or report it with this message.")

    def _where(self) -> tuple:
        return self.kind.group, self.kind.version, self.namespace, self.kind.plural

    def create(self, manifest: dict) -> dict:
        """Create the job; one that already exists (the step's pod restarted) is followed, not replaced."""
        name = manifest["metadata"]["name"]
        created = self._call("create", name, lambda: self.client.create_namespaced_custom_object(
            *self._where(), manifest, _request_timeout=REQUEST_TIMEOUT_S), tolerate=409)
        return created if created is not None else self.get(name)

    def get(self, name: str) -> dict:
        return self._call("get", name, lambda: self.client.get_namespaced_custom_object(
            *self._where(), name, _request_timeout=REQUEST_TIMEOUT_S))

    def delete(self, name: str) -> None:
        self._call("delete", name, lambda: self.client.delete_namespaced_custom_object(
            *self._where(), name, _request_timeout=REQUEST_TIMEOUT_S))


#: The earlier name (the TFJob was the only kind).
TFJobApi = TrainingJobApi


def detect(custom_objects, server: str, timeout: float = REQUEST_TIMEOUT_S, who: str = "the training step") -> JobKind:
    """The training-job kind the API server serves (discovery), TFJob first; neither is a paragraph (``who``
    asks, for the paragraphs: the step, or ``deploy``'s pre-flight)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    seen = []
    for kind in KINDS:
        try:
            resources = custom_objects.get_api_resources(kind.group, kind.version,
                                                         _request_timeout=timeout)
        except ApiException as error:
            if error.status == 404:
                seen.append(f"no {kind.group}/{kind.version}")
                continue
            if error.status == 401:
                raise KubeApiError(
                    f"The Kubernetes API server at {server} rejected the credentials of {who} "
                    f"({error.reason}) while discovering its training-job resources: the service-account token "
                    "(or the kubeconfig user) is invalid or expired.") from None
            raise KubeApiError(f"The Kubernetes API server at {server} refused the discovery of "
                               f"{kind.group}/{kind.version} (HTTP {error.status}: {error.reason}).") from None
        except HTTPError as error:
            raise KubeApiError(
                f"{who[0].upper()}{who[1:]} could not reach the Kubernetes API server at {server} "
                f"({type(error).__name__}: {str(error)[:200]}). Inside Kubeflow this is the in-cluster address "
                "(KUBERNETES_SERVICE_HOST); elsewhere check the server in $KUBECONFIG.") from None
        names = {resource.name for resource in resources.resources or []}
        if kind.plural in names:
            return kind
        seen.append(f"{kind.group}/{kind.version} without {kind.plural}")
    raise NoTrainingJob(
        f"The cluster at {server} has no training-job resource ({'; '.join(seen)}): a package compiled with "
        "--trainer-workers / --tune-workers trains in a TFJob (the Kubeflow Training Operator v1.x, "
        "`kubectl get crd tfjobs.kubeflow.org`) or a TrainJob (Kubeflow Trainer v2, `kubectl get crd "
        f"trainjobs.trainer.kubeflow.org`, with this project's runtime: `kubectl apply -f {RUNTIME_FILE}`). "
        "Install one of them, or compile without --trainer-workers / --tune-workers to train in the step's own pod.")


def kubeconfig_path(environ=os.environ) -> str:
    return environ.get("KUBECONFIG") or os.path.expanduser("~/.kube/config")


def in_cluster(environ=os.environ, service_account_dir: str = SERVICE_ACCOUNT_DIR) -> bool:
    """Inside a pod with a service-account token (what the in-cluster loader needs)."""
    return bool(environ.get("KUBERNETES_SERVICE_HOST")) and os.path.isfile(os.path.join(service_account_dir, "token"))


def api_client(environ=os.environ, service_account_dir: str = SERVICE_ACCOUNT_DIR,
               retries: int | None = None) -> tuple[Any, str, str | None]:
    """(ApiClient, namespace, service account): in-cluster when the pod has a service-account token, else the
    kubeconfig and its current context's namespace. ``retries`` overrides urllib3's default of 3 (a caller
    that bounds its wait passes 0). Raises the loader's ConfigException or OSError for an unusable kubeconfig."""
    from kubernetes import client, config

    configuration = client.Configuration()
    account = None
    if in_cluster(environ, service_account_dir):
        from kubernetes.config.incluster_config import InClusterConfigLoader

        token_file = os.path.join(service_account_dir, "token")
        InClusterConfigLoader(token_filename=token_file, cert_filename=os.path.join(service_account_dir, "ca.crt"),
                              environ=environ).load_and_set(configuration)
        with open(os.path.join(service_account_dir, "namespace")) as handle:
            namespace = handle.read().strip()
        with open(token_file) as handle:
            account = _service_account(handle.read().strip())
    else:
        path = kubeconfig_path(environ)
        config.load_kube_config(config_file=path, client_configuration=configuration)
        _, active = config.list_kube_config_contexts(config_file=path)
        namespace = (active.get("context") or {}).get("namespace") or "default"
    if retries is not None:
        configuration.retries = retries
    return client.ApiClient(configuration), namespace, account


def connect(environ=os.environ, service_account_dir: str = SERVICE_ACCOUNT_DIR,
            kind: JobKind | None = None) -> TrainingJobApi:
    """In-cluster when the pod has a service-account token, else the kubeconfig; the job kind the cluster has
    unless ``kind`` is given."""
    from kubernetes import client
    from kubernetes.config.config_exception import ConfigException

    try:
        api, namespace, account = api_client(environ, service_account_dir)
    except (ConfigException, OSError) as error:
        if in_cluster(environ, service_account_dir):
            raise
        raise KubeApiError(
            f"The Trainer or Tuner step (compile --trainer-workers / --tune-workers) creates a TFJob or TrainJob "
            f"through the Kubernetes API, but "
            f"it runs outside a cluster pod (no service-account token in {service_account_dir}) and the "
            f"kubeconfig {kubeconfig_path(environ)} is unusable ({str(error)[:200]}). Run the pipeline on Kubeflow, "
            "or point $KUBECONFIG at a kubeconfig for the cluster with the Training Operator.") from None
    custom_objects = client.CustomObjectsApi(api)
    server = api.configuration.host
    return TrainingJobApi(custom_objects, namespace, account, server, kind or detect(custom_objects, server))

"""What a KFP user sets per step, compiled into the package where a KFP 2.x backend reads it.

- CPU/memory requests and limits, and a GPU for the Trainer: the container's ``resources``
  in the PipelineSpec (kubeflow/pipelines 2.3.0 backend ``src/v2/driver/driver.go``
  initPodSpecPatch reads cpuLimit/memoryLimit/cpuRequest/memoryRequest/accelerator).
- Plain environment variables (the S3 endpoint): the container's ``env`` (same function).
- Secrets as env or volumes, node selectors, tolerations, image pull secrets: the
  Kubernetes platform spec, a second YAML document keyed by executor label
  (``kubernetes_platform/proto/kubernetes_executor_config.proto``; applied by driver.go
  extendPodSpecPatch; parsed by ``src/apiserver/template/v2_template.go``).
- The service account is a property of the run, not of the package: ``deploy --service-account``.
"""
import dataclasses
import re

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.storage import KubeflowConfigError, s3_environment

TRAINER_TASK = "Trainer"
# KFP's own MinIO keeps its keys under these names (backend src/v2/config/env.go).
S3_SECRET_KEYS = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # a Kubernetes object name
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_QUANTITY = re.compile(r"(\d+(\.\d+)?)(m|Ki|Mi|Gi|Ti|K|M|G|T)?")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


@dataclasses.dataclass
class StepSettings:
    """Pod settings for every step (``cpu``/``memory``) and for the Trainer (``trainer_*``)."""

    cpu_request: str | None = None       # Kubernetes quantities: "500m", "2"
    cpu_limit: str | None = None
    memory_request: str | None = None    # "512Mi", "4G"
    memory_limit: str | None = None
    trainer_cpu: str | None = None       # request and limit for the Trainer, over cpu_*
    trainer_memory: str | None = None
    trainer_gpus: int = 0
    gpu_type: str = "nvidia.com/gpu"
    secret_env: list[str] = dataclasses.field(default_factory=list)     # SECRET:KEY=ENV_VAR
    secret_volume: list[str] = dataclasses.field(default_factory=list)  # SECRET=/mount/path
    node_selector: list[str] = dataclasses.field(default_factory=list)  # label=value
    tolerations: list[str] = dataclasses.field(default_factory=list)    # key[=value]:Effect
    image_pull_secrets: list[str] = dataclasses.field(default_factory=list)
    s3_endpoint: str | None = None       # http://minio-service.kubeflow:9000
    s3_secret: str | None = None         # a secret with keys accesskey/secretkey
    bundled_store: bool = False          # a minio:// root: the step finds the endpoint (bundled_store.py)

    def __post_init__(self) -> None:
        for name in ("cpu_request", "cpu_limit", "memory_request", "memory_limit", "trainer_cpu",
                     "trainer_memory"):
            _quantity(getattr(self, name), name.replace("_", "-"))
        if self.trainer_gpus < 0:
            raise KubeflowConfigError(f"--trainer-gpus {self.trainer_gpus}: a GPU count is 0 or more.")
        if self.s3_secret and not self.s3_endpoint and not self.bundled_store:
            raise KubeflowConfigError(
                f"--s3-secret {self.s3_secret} without --s3-endpoint: the steps need both the keys and the "
                "endpoint, e.g. --s3-endpoint http://minio-service.kubeflow:9000 --s3-secret "
                "mlpipeline-minio-artifact.")
        self.parsed_secret_env()
        self.parsed_secret_volume()
        self.parsed_node_selector()
        self.parsed_tolerations()
        for name in self.image_pull_secrets:
            _secret_name(name, "--image-pull-secret", name)

    def parsed_secret_env(self) -> dict[str, list[tuple[str, str]]]:
        """secret -> [(key, env var)], the S3 secret's keys included."""
        result: dict[str, list[tuple[str, str]]] = {}
        if self.s3_secret:
            _secret_name(self.s3_secret, "--s3-secret", self.s3_secret)
            result[self.s3_secret] = list(S3_SECRET_KEYS.items())
        for text in self.secret_env:
            match = re.fullmatch(r"([^:=]*):([^=]*)=(.*)", text)
            if not match:
                raise KubeflowConfigError(
                    f"--secret-env {text!r} is not SECRET:KEY=ENV_VAR, e.g. --secret-env "
                    "db-credentials:password=DB_PASSWORD (the key of the Kubernetes secret, and the "
                    "variable the steps read).")
            secret, key, env = match.groups()
            _secret_name(secret, "--secret-env", text)
            if not key or not _ENV.fullmatch(env):
                raise KubeflowConfigError(f"--secret-env {text!r}: the secret key must be non-empty and "
                                          f"{env!r} a valid environment variable name (letters, digits, _).")
            result.setdefault(secret, []).append((key, env))
        return result

    def parsed_secret_volume(self) -> list[tuple[str, str]]:
        result = []
        for text in self.secret_volume:
            secret, _, path = text.partition("=")
            _secret_name(secret, "--secret-volume", text)
            if not path.startswith("/"):
                raise KubeflowConfigError(f"--secret-volume {text!r} is not SECRET=/absolute/mount/path, "
                                          "e.g. --secret-volume gcp-key=/secrets/gcp.")
            result.append((secret, path))
        return result

    def parsed_node_selector(self) -> dict[str, str]:
        result = {}
        for text in self.node_selector:
            label, sep, value = text.partition("=")
            if not sep or not label:
                raise KubeflowConfigError(f"--node-selector {text!r} is not LABEL=VALUE, e.g. "
                                          "--node-selector cloud.google.com/gke-nodepool=highmem.")
            result[label] = value
        return result

    def parsed_tolerations(self) -> list[dict]:
        result = []
        for text in self.tolerations:
            match = re.fullmatch(r"([^=:]+)(=([^:]*))?:(\w+)", text)
            if not match or match.group(4) not in _EFFECTS:
                raise KubeflowConfigError(
                    f"--toleration {text!r} is not KEY[=VALUE]:EFFECT with EFFECT one of {', '.join(_EFFECTS)}, "
                    "e.g. --toleration nvidia.com/gpu=present:NoSchedule.")
            key, _, value, effect = match.groups()
            toleration = {"key": key, "operator": "Equal" if value is not None else "Exists", "effect": effect}
            if value is not None:
                toleration["value"] = value
            result.append(toleration)
        return result


def _quantity(value: str | None, flag: str) -> None:
    if value is not None and not _QUANTITY.fullmatch(value):
        raise KubeflowConfigError(f"--{flag} {value!r} is not a Kubernetes quantity such as 500m, 2, 512Mi or 4G.")


def _secret_name(name: str, flag: str, text: str) -> None:
    if not name:
        raise KubeflowConfigError(f"{flag} {text!r} names no secret: give the name of a Kubernetes secret in "
                                  "the namespace the pipeline runs in (`kubectl get secrets -n NAMESPACE`).")
    if not _NAME.fullmatch(name):
        raise KubeflowConfigError(f"{flag} {text!r}: {name!r} is not a valid Kubernetes secret name (lower-case "
                                  "letters, digits, '-' and '.').")


_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _cpu(value: str) -> float:
    return float(value[:-1]) / 1000 if value.endswith("m") else float(value)


def _memory_gb(value: str) -> float:
    """ResourceSpec memory fields are in GB (10^9 bytes), as kfp's own compiler writes them."""
    match = _QUANTITY.fullmatch(value)
    assert match is not None, value  # StepSettings checked every quantity (_quantity)
    number, _, unit = match.group(1, 2, 3)
    return float(number) * _UNITS[unit or ""] / 1e9


def _resources(settings: StepSettings, task: str) -> dict:
    cpu_request, cpu_limit = settings.cpu_request, settings.cpu_limit
    memory_request, memory_limit = settings.memory_request, settings.memory_limit
    resources: dict = {}
    if task == TRAINER_TASK:
        cpu_request, cpu_limit = (settings.trainer_cpu or settings.cpu_request,
                                  settings.trainer_cpu or settings.cpu_limit)
        memory_request, memory_limit = (settings.trainer_memory or settings.memory_request,
                                        settings.trainer_memory or settings.memory_limit)
        if settings.trainer_gpus:
            resources["accelerator"] = {"type": settings.gpu_type, "count": settings.trainer_gpus}
    for field, value, convert in (("cpuRequest", cpu_request, _cpu), ("cpuLimit", cpu_limit, _cpu),
                                  ("memoryRequest", memory_request, _memory_gb),
                                  ("memoryLimit", memory_limit, _memory_gb)):
        if value:
            resources[field] = convert(value)
    return resources


def apply_step_settings(spec: dict, settings: StepSettings) -> dict | None:
    """Write resources and env into ``spec``'s containers; returns the platform spec document or None."""
    executors = spec["deploymentSpec"]["executors"]
    label_of = {task: spec["components"][body["componentRef"]["name"]]["executorLabel"]
                for task, body in spec["root"]["dag"]["tasks"].items()}
    env = s3_environment(settings.s3_endpoint) if settings.s3_endpoint else {}
    if settings.bundled_store:
        env[bundled_store.MARKER] = bundled_store.MARKER_VALUE
    for task, label in label_of.items():
        container = executors[label]["container"]
        resources = _resources(settings, task)
        if resources:
            container["resources"] = resources
        if env:
            container["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    config: dict = {}
    secret_env = settings.parsed_secret_env()
    if secret_env:
        config["secretAsEnv"] = [{"secretName": secret, "keyToEnv": [{"secretKey": k, "envVar": e} for k, e in pairs]}
                                 for secret, pairs in secret_env.items()]
    if settings.secret_volume:
        config["secretAsVolume"] = [{"secretName": s, "mountPath": p} for s, p in settings.parsed_secret_volume()]
    if settings.node_selector:
        config["nodeSelector"] = {"labels": settings.parsed_node_selector()}
    if settings.tolerations:
        config["tolerations"] = settings.parsed_tolerations()
    if settings.image_pull_secrets:
        config["imagePullSecret"] = [{"secretName": name} for name in settings.image_pull_secrets]
    if not config:
        return None
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": {
        label: config for label in sorted(set(label_of.values()))}}}}}

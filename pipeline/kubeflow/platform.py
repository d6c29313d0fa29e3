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

``--env`` and ``--secret-env`` apply to every step, or to one step when prefixed with its task
name (``Trainer/NAME=VALUE``). The GPU (``--trainer-gpus``) goes to the Trainer alone.
The image: KFP's cache key holds the container's image string (backend
``src/v2/cacheutils/cache.go`` GenerateCacheKey), so ``IMAGE@sha256:DIGEST`` makes it the
image's content, and a tag (mutable) is reduced to the digest when both are given.
"""
import dataclasses
import logging
import re

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.k8s_grammar import (
    IMAGE_REFERENCE,
    check_dns_subdomain,
    check_image,
    check_label_key,
    check_label_value,
    check_request_within_limit,
    check_secret_key,
    parse_quantity,
)
from pipeline.kubeflow.storage import KubeflowConfigError, s3_environment
from pipeline.settings import check_values, setting

log = logging.getLogger("pipeline")

TRAINER_TASK = "Trainer"
# KFP's own MinIO keeps its keys under these names (backend src/v2/config/env.go).
S3_SECRET_KEYS = {"accesskey": "AWS_ACCESS_KEY_ID", "secretkey": "AWS_SECRET_ACCESS_KEY"}
_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Environment variable names that hold secrets by convention: *SECRET* (AWS_SECRET_ACCESS_KEY), *PASSWORD*,
#: *_TOKEN (GITHUB_TOKEN; not TOKENIZERS_PARALLELISM), *API_KEY, *PRIVATE_KEY. GOOGLE_APPLICATION_CREDENTIALS
#: holds a path (to a --secret-volume), not the secret: not matched.
_SECRET_NAME = re.compile(r"SECRET|PASSWORD|PASSWD|(^|_)(PASS|PWD|TOKEN|API_?KEY|PRIVATE_?KEY|AUTH_?KEY)(_|$)",
                          re.IGNORECASE)


def looks_secret(name: str) -> bool:
    """True for an environment variable name that by convention holds a secret (--env refuses it)."""
    return bool(_SECRET_NAME.search(name))
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


_POD = "pod settings (every step unless named Trainer)"
_COMPILE = frozenset({"compile"})


def _pod_setting(default, *, flag: str, help: str, **spec):
    """A pod setting: a flag of ``compile`` only, in its own --help section (pipeline/settings.py)."""
    return setting(default, flag=flag, help=help, commands=_COMPILE, group=_POD, **spec)


def _pod_list(*, flag: str, metavar: str, help: str):
    return setting(flag=flag, help=help, commands=_COMPILE, group=_POD, repeatable=True, metavar=metavar,
                   default_factory=list)


@dataclasses.dataclass
class StepSettings:
    """Pod settings for every step (``cpu``/``memory``) and for the Trainer (``trainer_*``), each declared
    once as a flag of ``compile`` (pipeline/settings.py), as the run settings are."""

    cpu_request: str | None = _pod_setting(None, flag="--cpu-request", metavar="CPU", help="CPU request, e.g. 500m")
    cpu_limit: str | None = _pod_setting(None, flag="--cpu-limit", metavar="CPU", help="CPU limit, e.g. 2")
    memory_request: str | None = _pod_setting(None, flag="--memory-request", metavar="MEMORY",
                                              help="memory request, e.g. 2Gi")
    memory_limit: str | None = _pod_setting(None, flag="--memory-limit", metavar="MEMORY",
                                            help="memory limit, e.g. 8Gi")
    trainer_cpu: str | None = _pod_setting(None, flag="--trainer-cpu", metavar="CPU",
                                           help="Trainer CPU request and limit, over --cpu-*")
    trainer_memory: str | None = _pod_setting(None, flag="--trainer-memory", metavar="MEMORY",
                                              help="Trainer memory request and limit, over --memory-*")
    trainer_gpus: int = _pod_setting(0, flag="--trainer-gpus", low=0, high=64, metavar="N", help="GPUs for the Trainer")
    gpu_type: str = _pod_setting("nvidia.com/gpu", flag="--gpu-type", metavar="RESOURCE", help="accelerator resource")
    secret_env: list[str] = _pod_list(flag="--secret-env", metavar="[STEP/]ENV=SECRET:KEY", help=(
        "a key of a Kubernetes secret as an environment variable of every step, or of STEP alone, e.g. "
        "Trainer/DB_PASSWORD=db-creds:password (repeatable; the earlier SECRET:KEY=ENV still works)"))
    env: list[str] = _pod_list(flag="--env", metavar="[STEP/]NAME=VALUE", help=(
        "an environment variable of every step, or of STEP alone, e.g. Trainer/TF_CPP_MIN_LOG_LEVEL=1 (repeatable; "
        "written in plain text into the package, so a secret-looking NAME such as *_PASSWORD, *_TOKEN or *SECRET* "
        "is refused: use --secret-env)"))
    secret_volume: list[str] = _pod_list(flag="--secret-volume", metavar="SECRET=/PATH",
                                         help="a Kubernetes secret mounted as files in every step (repeatable)")
    node_selector: list[str] = _pod_list(flag="--node-selector", metavar="LABEL=VALUE", help="(repeatable)")
    tolerations: list[str] = _pod_list(flag="--toleration", metavar="KEY[=VALUE]:EFFECT", help="(repeatable)")
    image_pull_secrets: list[str] = _pod_list(flag="--image-pull-secret", metavar="SECRET", help="(repeatable)")
    s3_endpoint: str | None = _pod_setting(None, flag="--s3-endpoint", metavar="URL", help=(
        "S3/MinIO endpoint URL for an s3:// root, e.g. http://minio-service.kubeflow:9000"))
    s3_secret: str | None = _pod_setting(None, flag="--s3-secret", metavar="SECRET", help=(
        "secret holding the S3 keys as accesskey/secretkey, e.g. mlpipeline-minio-artifact (KFP's MinIO)"))
    bundled_store: bool = False          # a minio:// root: the step finds the endpoint (bundled_store.py)

    def __post_init__(self) -> None:
        check_values(self)  # --trainer-gpus' range, named as the flag
        for name in ("cpu_request", "cpu_limit", "memory_request", "memory_limit", "trainer_cpu",
                     "trainer_memory"):
            _quantity(getattr(self, name), name.replace("_", "-"))
        check_request_within_limit(self.cpu_request, self.cpu_limit, "--cpu-request", "--cpu-limit")
        check_request_within_limit(self.memory_request, self.memory_limit, "--memory-request", "--memory-limit")
        if self.s3_secret and not self.s3_endpoint and not self.bundled_store:
            raise KubeflowConfigError(
                f"--s3-secret {self.s3_secret} without --s3-endpoint: the steps need both the keys and the "
                "endpoint, e.g. --s3-endpoint http://minio-service.kubeflow:9000 --s3-secret "
                "mlpipeline-minio-artifact.")
        self.parsed_secret_env()
        self.parsed_env()
        self.parsed_secret_volume()
        self.parsed_node_selector()
        self.parsed_tolerations()
        for name in self.image_pull_secrets:
            _secret_name(name, "--image-pull-secret", name)

    def parsed_secret_env(self, steps: set[str] | None = None) -> dict[str | None, dict[str, list[tuple[str, str]]]]:
        """step (None: every step) -> secret -> [(key, env var)], the S3 secret's keys included.

        ``[STEP/]ENV=SECRET:KEY``; the earlier ``SECRET:KEY=ENV`` (a ':' before the '=') still works.
        """
        result: dict[str | None, dict[str, list[tuple[str, str]]]] = {}
        if self.s3_secret:
            _secret_name(self.s3_secret, "--s3-secret", self.s3_secret)
            result.setdefault(None, {})[self.s3_secret] = list(S3_SECRET_KEYS.items())
        for text in self.secret_env:
            head, sep, _ = text.partition("=")
            if ":" in head:  # the earlier form, SECRET:KEY=ENV_VAR
                match = re.fullmatch(r"([^:=]*):([^=]*)=(.*)", text)
                step, secret, key, env = None, *(match.groups() if match else ("", "", ""))
            else:
                match = re.fullmatch(r"(?:([^/=]*)/)?([^=]*)=([^:]*):(.*)", text)
                step, env, secret, key = match.groups() if match else (None, "", "", "")
            if not match:
                raise KubeflowConfigError(
                    f"--secret-env {text!r} is not [STEP/]ENV_VAR=SECRET:KEY, e.g. --secret-env "
                    "DB_PASSWORD=db-credentials:password (the variable the steps read, the Kubernetes secret "
                    "and its key), or Trainer/DB_PASSWORD=db-credentials:password for the Trainer alone.")
            _secret_name(secret, "--secret-env", text)
            if not key or not _ENV.fullmatch(env):
                raise KubeflowConfigError(f"--secret-env {text!r}: the secret key must be non-empty and "
                                          f"{env!r} a valid environment variable name (letters, digits, _).")
            check_secret_key(key, "--secret-env", text)
            _step_name(step, "--secret-env", text, steps)
            result.setdefault(step, {}).setdefault(secret, []).append((key, env))
        return result

    def parsed_env(self, steps: set[str] | None = None) -> dict[str | None, dict[str, str]]:
        """step (None: every step) -> {NAME: VALUE} from ``--env [STEP/]NAME=VALUE``."""
        result: dict[str | None, dict[str, str]] = {}
        for text in self.env:
            head, sep, value = text.partition("=")
            step, _, name = head.rpartition("/")
            if not sep or not _ENV.fullmatch(name):
                raise KubeflowConfigError(
                    f"--env {text!r} is not [STEP/]NAME=VALUE with NAME a valid environment variable name "
                    "(letters, digits, _), e.g. --env LOG_LEVEL=debug, or --env Trainer/TF_CPP_MIN_LOG_LEVEL=1 "
                    "for the Trainer alone.")
            if looks_secret(name):
                raise KubeflowConfigError(
                    f"--env {head}=...: {name} looks like a secret, and --env writes its value in plain text into "
                    "the compiled package (readable by anyone who can read the package or the pipeline in the KFP "
                    f"UI). Keep it in a Kubernetes secret and pass --secret-env {head}=SECRET:KEY instead (e.g. "
                    f"`kubectl create secret generic my-secret --from-literal=key=...` and --secret-env "
                    f"{head}=my-secret:key).")
            _step_name(step or None, "--env", text, steps)
            result.setdefault(step or None, {})[name] = value
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
            check_label_key(label, "--node-selector", text)
            check_label_value(value, "--node-selector", text)
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
            check_label_key(key, "--toleration", text)
            if value is not None:
                check_label_value(value, "--toleration", text)
            toleration = {"key": key, "operator": "Equal" if value is not None else "Exists", "effect": effect}
            if value is not None:
                toleration["value"] = value
            result.append(toleration)
        return result


def _quantity(value: str | None, flag: str) -> None:
    if value is not None:
        parse_quantity(value, f"--{flag}")


def _step_name(step: str | None, flag: str, text: str, steps: set[str] | None) -> None:
    """A step prefix must name a task of the compiled pipeline (checked once it is compiled)."""
    if step is None or steps is None or step in steps:
        if step is not None and not step:
            raise KubeflowConfigError(f"{flag} {text!r}: the step before '/' is empty; drop the '/' for every step.")
        return
    raise KubeflowConfigError(f"{flag} {text!r}: the compiled pipeline has no step {step!r}; its steps are "
                              f"{', '.join(sorted(steps))} (task names as the KFP UI shows them).")


def pinned_image(image: str) -> str:
    """``image`` as the package names it: ``NAME@sha256:DIGEST`` when a digest is given (the tag
    dropped), else as given, with a warning that KFP's cache cannot tell rebuilds of a tag apart."""
    image = check_image(image)
    match = IMAGE_REFERENCE.fullmatch(image)
    assert match is not None, image  # check_image read it
    if match.group("digest"):
        if match.group("tag"):
            log.info("--image %s: the tag is dropped, the digest names the image (and KFP's cache key).", image)
        return f"{match.group('name')}@{match.group('digest')}"
    log.warning("--image %s has no digest: KFP's cache key holds the image name, so a step of a rebuilt image "
                "under the same tag can be served from the cache of the old one. Pass IMAGE@sha256:DIGEST "
                "(printed by `docker push`) so the cache follows the image's content.", image)
    return image


def _secret_name(name: str, flag: str, text: str) -> None:
    check_dns_subdomain(name, flag, "secret", text)


def _cpu(value: str) -> float:
    return float(parse_quantity(value, "cpu"))  # StepSettings checked every quantity (_quantity)


def _memory_gb(value: str) -> float:
    """ResourceSpec memory fields are in GB (10^9 bytes), as kfp's own compiler writes them."""
    return float(parse_quantity(value, "memory")) / 1e9


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
    steps = set(label_of)
    env = settings.parsed_env(steps)
    secret_env = settings.parsed_secret_env(steps)
    s3 = s3_environment(settings.s3_endpoint) if settings.s3_endpoint else {}
    if settings.bundled_store:
        s3[bundled_store.MARKER] = bundled_store.MARKER_VALUE
    configs: dict[str, dict] = {}
    for task, label in sorted(label_of.items()):
        container = executors[label]["container"]
        resources = _resources(settings, task)
        if resources:
            container["resources"] = resources
        values = {**s3, **env.get(None, {}), **env.get(task, {})}
        if values:
            container["env"] = [{"name": k, "value": v} for k, v in sorted(values.items())]
        config: dict = {}
        secrets: dict[str, list[tuple[str, str]]] = {}
        for scope in (None, task):
            for secret, pairs in secret_env.get(scope, {}).items():
                secrets.setdefault(secret, []).extend(pairs)
        if secrets:
            config["secretAsEnv"] = [{"secretName": secret, "keyToEnv": [{"secretKey": k, "envVar": e}
                                                                         for k, e in pairs]}
                                     for secret, pairs in secrets.items()]
        if settings.secret_volume:
            config["secretAsVolume"] = [{"secretName": s, "mountPath": p} for s, p in settings.parsed_secret_volume()]
        if settings.node_selector:
            config["nodeSelector"] = {"labels": settings.parsed_node_selector()}
        if settings.tolerations:
            config["tolerations"] = settings.parsed_tolerations()
        if settings.image_pull_secrets:
            config["imagePullSecret"] = [{"secretName": name} for name in settings.image_pull_secrets]
        if config:
            configs[label] = config
    if not configs:
        return None
    return {"platforms": {"kubernetes": {"deploymentSpec": {"executors": dict(sorted(configs.items()))}}}}

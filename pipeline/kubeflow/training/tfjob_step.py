"""``compile --trainer-workers N``: the compiled Trainer step's pod becomes a TFJob launcher.

The graph already gave the Trainer the launcher's ``run_fn`` (pipeline/kubeflow/training/trainer_launcher.py). Here,
where the image and pod settings are known, the package gets (a) the TFJob replicas' pod
template, as the Trainer container's ``TFJOB_TEMPLATE`` environment variable (a KFP 2.x driver
copies a container's ``env`` into the pod: backend src/v2/driver/driver.go initPodSpecPatch),
built from the same settings the Trainer pod would have had: the image, ``--trainer-cpu``,
``--trainer-memory``, ``--trainer-gpus``, S3 env, secrets, node selector, tolerations, pull
secrets; and (b) the launcher pod itself gets the settings of every other step, since it only
waits (a GPU held by a waiting pod is the costly mistake).
"""
from __future__ import annotations

import json
from typing import Any

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.platform import TRAINER_TASK, StepSettings
from pipeline.kubeflow.storage import s3_environment
from pipeline.kubeflow.training.trainer_launcher import TEMPLATE_ENV

TUNER_TASK = "Tuner"  # pipeline/graph.py TUNER


def replica_template(image: str, settings: StepSettings, task: str = TRAINER_TASK) -> dict:
    """The TFJob replicas' image and pod settings (Kubernetes field names), from compile's options
    (``--env``/``--secret-env`` for every step and for ``task``)."""
    container: dict = {}
    requests = {k: v for k, v in (("cpu", settings.trainer_cpu or settings.cpu_request),
                                  ("memory", settings.trainer_memory or settings.memory_request)) if v}
    limits = {k: v for k, v in (("cpu", settings.trainer_cpu or settings.cpu_limit),
                                ("memory", settings.trainer_memory or settings.memory_limit)) if v}
    if settings.trainer_gpus:
        limits[settings.gpu_type] = str(settings.trainer_gpus)
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    # The store as the steps have it: an endpoint given at compile, or the bundled store's marker, with
    # which the replica finds the store's Service as a step does (pipeline/kubeflow/bundled_store.py).
    store = {bundled_store.MARKER: bundled_store.MARKER_VALUE} if settings.bundled_store else {}
    plain = {**(s3_environment(settings.s3_endpoint) if settings.s3_endpoint else store),
             **settings.parsed_env().get(None, {}), **settings.parsed_env().get(task, {})}
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(plain.items())]
    secrets = settings.parsed_secret_env()
    env += [{"name": var, "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}
            for scope in (None, task) for secret, pairs in secrets.get(scope, {}).items() for key, var in pairs]
    if env:
        container["env"] = env
    pod: dict = {}
    volumes = settings.parsed_secret_volume()
    if volumes:
        container["volumeMounts"] = [{"name": f"secret-{i}", "mountPath": path, "readOnly": True}
                                     for i, (_, path) in enumerate(volumes)]
        pod["volumes"] = [{"name": f"secret-{i}", "secret": {"secretName": secret}}
                          for i, (secret, _) in enumerate(volumes)]
    if settings.node_selector:
        pod["nodeSelector"] = settings.parsed_node_selector()
    if settings.tolerations:
        pod["tolerations"] = settings.parsed_tolerations()
    if settings.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": name} for name in settings.image_pull_secrets]
    return {"image": image, "container": container, "pod": pod}


def apply_trainer_workers(spec: dict, image: str, settings: StepSettings, task: str = TRAINER_TASK) -> None:
    """Write the replicas' template into the step's container; give the launcher an ordinary step's pod."""
    executors = spec["deploymentSpec"]["executors"]
    labels = {name: spec["components"][body["componentRef"]["name"]]["executorLabel"]
              for name, body in spec["root"]["dag"]["tasks"].items()}
    launcher = executors[labels[task]]["container"]
    other = next(executors[label]["container"] for name, label in sorted(labels.items())
                 if name not in (TRAINER_TASK, TUNER_TASK))
    if other.get("resources"):
        launcher["resources"] = dict(other["resources"])
    else:
        launcher.pop("resources", None)
    launcher["env"] = [*launcher.get("env", []), {"name": TEMPLATE_ENV, "value": json.dumps(
        replica_template(image, settings, task), sort_keys=True, separators=(",", ":"))}]


def apply_tune_workers(spec: dict, image: str, settings: StepSettings) -> None:
    """``compile --tune-workers N``: the Tuner step launches the TFJob (tuner_launcher.py); its
    replicas run trials, i.e. train models, so they get the Trainer's pod settings."""
    apply_trainer_workers(spec, image, settings, TUNER_TASK)

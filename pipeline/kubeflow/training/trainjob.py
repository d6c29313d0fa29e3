"""A Kubeflow Trainer v2 ``TrainJob`` that runs the same workers as the TFJob (tfjob.py), for clusters without it.

Kubeflow Trainer v2 (kubeflow/trainer v2.x, ``trainer.kubeflow.org/v1alpha1``) replaced the
Training Operator's TFJob and ships no TensorFlow runtime, so the project ships a plain one:
``kubeflow/trainjob-runtime.yaml``, a ``ClusterTrainingRuntime`` named :data:`RUNTIME` with one
Indexed replicated job ``node`` (the Trainer's convention: pkg/constants/constants.go ``Node``
and the ``trainer.kubeflow.org/trainjob-ancestor-step: trainer`` label), ``restartPolicy: Never``
and ``backoffLimit: 0`` (a worker that dies fails the job, as with the TFJob's replicas).

With no ML policy the runtime's PlainML plugin (pkg/runtime/framework/plugins/plainml/plainml.go
@v2.1.0) only sets the node count from ``trainer.numNodes`` and copies ``trainer.env`` into the
``node`` container; the JobSet builder copies ``trainer.image``/``command``/``args`` and
``resourcesPerNode`` (plugins/jobset/builder.go). Nothing sets ``TF_CONFIG``, so the launcher
puts the cluster spec it builds into :data:`CLUSTER_ENV` and each pod derives its own
``TF_CONFIG`` from it and its Indexed-Job index (``JOB_COMPLETION_INDEX``, set by Kubernetes'
Job controller): index 0 is the chief, index ``i`` worker ``i-1`` — the TFJob's topology, so
``models/common/multi_worker.py`` and the Tuner's roles read it unchanged (:func:`ensure_tf_config`).
Addresses are the JobSet pods' DNS names ``<job>-node-0-<i>.<job>`` (the Trainer's torch plugin
builds its master address the same way, plugins/torch/torch.go).

Pod settings that a TrainJob cannot carry in ``trainer`` (service account, node selector,
tolerations, volumes, pull secrets, volume mounts) and the pods' metadata (no Istio sidecar,
tfjob.py :data:`NO_SIDECAR`) go into a ``podTemplateOverrides`` entry for the ``node`` job; env
stays in ``trainer.env`` (the webhook refuses env in an override of the ``node`` container,
plugins/jobset/jobset.go Validate).
"""
from __future__ import annotations

import json
import os

from stackenv.errors import ProjectError

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
RUNTIME = "tfx-tensorflow"
RUNTIME_FILE = "kubeflow/trainjob-runtime.yaml"
NODE = "node"                       # the trainer's replicated job and container (constants.Node)
PORT = 2222                         # what the workers listen on: the TFJob's tfjob-port, for one worker code path
CLUSTER_ENV = "TFX_TF_CLUSTER"      # the cluster spec the launcher builds
INDEX_ENV = "JOB_COMPLETION_INDEX"  # Kubernetes' Indexed Job index of the pod
TF_CONFIG = "TF_CONFIG"


class TrainJobPodError(ProjectError):
    """A TrainJob pod cannot tell its place in the cluster."""


def node_address(job_name: str, index: int) -> str:
    """Pod ``index`` of the TrainJob's ``node`` job: JobSet hostname ``<jobset>-<rjob>-<job idx>-<pod idx>``,
    subdomain the JobSet (= TrainJob) name."""
    return f"{job_name}-{NODE}-0-{index}.{job_name}:{PORT}"


def cluster_spec(job_name: str, nodes: int) -> dict:
    """The TFJob's topology on ``nodes`` pods: one chief (index 0) and ``nodes - 1`` workers."""
    addresses = [node_address(job_name, i) for i in range(nodes)]
    return {"chief": addresses[:1], **({"worker": addresses[1:]} if nodes > 1 else {})}


def tf_config_for(cluster: dict, index: int) -> str:
    """``TF_CONFIG`` of pod ``index``, in the Training Operator's format (genTFConfigJSONStr)."""
    task = {"type": "chief", "index": 0} if index == 0 else {"type": "worker", "index": index - 1}
    return json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}, separators=(",", ":"))


def ensure_tf_config(environ=os.environ) -> None:
    """In a TrainJob pod, set ``TF_CONFIG`` from :data:`CLUSTER_ENV` and the pod's index; elsewhere nothing."""
    raw = environ.get(CLUSTER_ENV)
    if not raw or environ.get(TF_CONFIG):
        return
    index = environ.get(INDEX_ENV, "")
    try:
        cluster = json.loads(raw)
        nodes = len(cluster.get("chief", [])) + len(cluster.get("worker", []))
        position = int(index)
        if not 0 <= position < nodes:
            raise ValueError(f"index {position} is not one of the {nodes} nodes")
    except (ValueError, TypeError, AttributeError) as error:
        raise TrainJobPodError(
            f"This TrainJob pod cannot derive TF_CONFIG: {CLUSTER_ENV}={raw[:200]!r}, {INDEX_ENV}={index!r} "
            f"({error}). The pod must come from the Indexed 'node' job of the ClusterTrainingRuntime {RUNTIME!r} "
            f"this project ships: `kubectl apply -f {RUNTIME_FILE}` (a runtime of your own needs "
            "`completionMode: Indexed` on its trainer job).") from None
    environ[TF_CONFIG] = tf_config_for(cluster, position)


def trainjob_manifest(job: dict, settings) -> dict:
    """The TrainJob of ``settings.workers`` pods running ``settings.module`` with ``job`` (tfjob.TFJobSettings)."""
    from pipeline.kubeflow.training.tfjob import pod_metadata

    settings.check()
    name = settings.name
    pod_container = json.loads(json.dumps(settings.pod.get("container") or {}))
    pod = json.loads(json.dumps(settings.pod.get("pod") or {}))
    unknown = set(pod_container) - {"resources", "env", "volumeMounts"}
    if unknown:
        raise ValueError(f"a TrainJob's node container cannot carry {sorted(unknown)}")
    resources = pod_container.get("resources") or {}
    limits = {k: v for k, v in (("cpu", settings.cpu), ("memory", settings.memory)) if v}
    if limits:
        resources = {"requests": {**resources.get("requests", {}), **limits},
                     "limits": {**resources.get("limits", {}), **limits}}
    trainer = {"image": settings.image, "command": ["python", "-m", settings.module],
               "args": ["--job", json.dumps(job, sort_keys=True)], "numNodes": settings.workers,
               "env": [*pod_container.get("env", []),
                       {"name": CLUSTER_ENV, "value": json.dumps(cluster_spec(name, settings.workers),
                                                                 separators=(",", ":"))}]}
    if resources:
        trainer["resourcesPerNode"] = resources
    override_spec = {key: pod[key] for key in ("nodeSelector", "tolerations", "volumes", "imagePullSecrets")
                     if pod.get(key)}
    if settings.service_account:
        override_spec["serviceAccountName"] = settings.service_account
    if pod_container.get("volumeMounts"):
        override_spec["containers"] = [{"name": NODE, "volumeMounts": pod_container["volumeMounts"]}]
    override = {"targetJobs": [{"name": NODE}], "metadata": pod_metadata()}
    if override_spec:
        override["spec"] = override_spec
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name, "namespace": settings.namespace},
            "spec": {"runtimeRef": {"name": RUNTIME, "apiGroup": "trainer.kubeflow.org",
                                    "kind": "ClusterTrainingRuntime"},
                     "trainer": trainer, "podTemplateOverrides": [override]}}


def job_manifest(kind: str, job: dict, settings) -> dict:
    """The manifest of the training-job ``kind`` the cluster has ("TFJob" or "TrainJob", kube_api.detect)."""
    from pipeline.kubeflow.training.tfjob import tfjob_manifest

    return trainjob_manifest(job, settings) if kind == KIND else tfjob_manifest(job, settings)

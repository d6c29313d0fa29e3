"""A Kubeflow Training Operator ``TFJob`` that runs the Trainer's ``run_fn`` on N workers.

``python -m pipeline tfjob`` writes kubeflow/tfjob.yaml (``kubectl apply -f`` it): one
``Chief`` and N-1 ``Worker`` replicas of the pipeline image, each running
``python -m pipeline.kubeflow.training.trainer_worker`` (trainer_worker.py) with the same job: the
examples the family's Trainer reads and the transform graph of a pipeline run, and the Trainer settings the
pipeline graph itself would give its Trainer (read from ``create_pipeline``, so the job
cannot drift from a pipeline run), with strategy ``multi_worker``.

What the operator does, read from kubeflow/training-operator v1.9.0: it requires a
container named ``tensorflow`` with an image in every replica and at most one Chief
(pkg/webhooks/tensorflow/tfjob_webhook.go); it creates a headless service per replica and
sets ``TF_CONFIG`` in each pod to ``{"cluster": {"chief": [...], "worker": [...]}, "task":
{"type": "worker", "index": i}, "environment": "cloud"}`` with addresses
``<job>-<type>-<i>.<namespace>.svc:<port>``, the port being the container port named
``tfjob-port`` or 2222 (pkg/controller.v1/tensorflow/tensorflow.go genTFConfigJSONStr).
``models/common/multi_worker.py`` reads exactly that; the chief exports the model.

``restartPolicy: Never``: a worker that dies fails the others within the bounded waits
(``WorkerFailure``), so restarting one pod cannot resume the collective; re-apply the job.

Every pod is labelled and annotated ``sidecar.istio.io/inject: "false"`` (:data:`NO_SIDECAR`): in
a multi-user Kubeflow namespace (``istio-injection=enabled``) Istio's webhook would add an
``istio-proxy`` container that never exits, and the operator judges a replica by its pod's phase
(pkg/controller.v1/tensorflow/util.go), so the job would stay Running forever
(kubeflow/trainer#1183, #1148). Istio reads the label first, then the older annotation; KFP marks
its own step pods the same way (backend src/apiserver/template/v2_template.go).
"""
import dataclasses
import json
import re
from typing import Any

from stackenv.errors import ConfigError

import yaml

from pipeline.kubeflow.k8s_grammar import check_dns_label, check_dns_subdomain, check_image, parse_quantity
from pipeline.settings import check_values, setting

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CONTAINER = "tensorflow"      # the operator's TFJobDefaultContainerName
PORT_NAME = "tfjob-port"      # TFJobDefaultPortName
PORT = 2222                   # TFJobDefaultPort
DEFAULT_PATH = "kubeflow/tfjob.yaml"
#: Istio's per-pod opt-out of sidecar injection, set as a label and as an annotation.
NO_SIDECAR = {"sidecar.istio.io/inject": "false"}
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


#: The subcommand whose flags the job's settings are.
TFJOB_COMMAND = frozenset({"tfjob"})


@dataclasses.dataclass(frozen=True)
class TFJobSettings:
    """Where the job runs and what it reads and writes (object-store URIs the pods can reach): the ``tfjob``
    command's flags, declared once (pipeline/settings.py); the launchers of a Kubeflow step fill the same
    fields from the step's execution."""

    image: str = setting(flag="--image", help="pipeline image (built from kubeflow/Dockerfile)", required=True,
                         commands=TFJOB_COMMAND)
    examples: str = setting(
        flag="--examples", required=True, metavar="URI", commands=TFJOB_COMMAND,
        help="the examples artifact the family's Trainer reads (holding Split-train/, Split-eval/): the "
             "ExampleGen's examples for cnn, which applies the transform graph itself; Transform's "
             "transformed_examples for seq2seq")
    transform_graph: str = setting(flag="--transform-graph", required=True, metavar="URI", commands=TFJOB_COMMAND,
                                   help="the same run's transform_graph")
    model_dir: str = setting(flag="--model-dir", required=True, metavar="URI", commands=TFJOB_COMMAND,
                             help="where the chief writes the model (URI/Format-Serving) and logs (URI/model_run)")
    workers: int = setting(2, flag="--workers", low=1, high=1000, commands=TFJOB_COMMAND,
                           help="training processes, the chief included")
    name: str = setting("trainer", flag="--name", commands=TFJOB_COMMAND, help="TFJob name")
    namespace: str = setting("kubeflow", flag="--namespace", commands=TFJOB_COMMAND,
                             help="Kubernetes namespace of the job")
    service_account: str | None = setting(None, flag="--service-account", commands=TFJOB_COMMAND,
                                          help="Kubernetes service account of the pods")
    cpu: str | None = setting(None, flag="--cpu", commands=TFJOB_COMMAND,
                              help="CPU request and limit per worker, e.g. 4")
    memory: str | None = setting(None, flag="--memory", commands=TFJOB_COMMAND,
                                 help="memory request and limit per worker, e.g. 8Gi")
    # More of each replica's pod: {"container": {env, resources, volumeMounts}, "pod": {nodeSelector, ...}}
    # (compile --trainer-workers: the Trainer step's pod settings, pipeline/kubeflow/training/tfjob_step.py).
    pod: dict = dataclasses.field(default_factory=dict)
    # False for the Trainer step's own launcher: its URIs come from the KFP launcher, under a root
    # `compile` already checked (and local in the tests' emulated cluster).
    remote_only: bool = True
    # What every replica runs: the training worker, or the Tuner's search worker (tuner_worker.py).
    module: str = "pipeline.kubeflow.training.trainer_worker"

    def check(self) -> None:
        check_values(self)  # --workers' range, named as the flag
        if not _DNS_1035.match(self.name) or len(self.name) > 63:
            raise ConfigError("--name", f"{self.name!r} is not a valid TFJob name: the operator requires a DNS-1035 "
                              "label (lower-case letters, digits and '-', starting with a letter, at most 63), "
                              "e.g. cnn-trainer.")
        check_image(self.image)
        check_dns_label(self.namespace, "--namespace", "namespace")
        if self.service_account is not None:
            check_dns_subdomain(self.service_account, "--service-account", "service account")
        for flag, quantity in (("--cpu", self.cpu), ("--memory", self.memory)):
            if quantity is not None:
                parse_quantity(quantity, flag)
        uris = (("--examples", self.examples),
                ("--transform-graph", self.transform_graph), ("--model-dir", self.model_dir))
        for flag, uri in uris:
            if self.remote_only and "://" not in uri:
                raise ConfigError(flag, f"{uri!r} is a local path, which the TFJob's pods cannot read; pass an "
                                  "object-store URI (gs://..., s3://...), e.g. the Transform outputs of a "
                                  "Kubeflow run of this pipeline.")


def trainer_job(config, dataset, settings: TFJobSettings) -> dict:
    """The trainer_worker job: the pipeline graph's own Trainer settings, strategy multi_worker."""
    from pipeline import graph

    config.strategy = "multi_worker"
    trainer = next(node for node in graph.create_pipeline(config, dataset).components if node.id == graph.TRAINER)
    properties = trainer.exec_properties
    model_dir = settings.model_dir.rstrip("/")
    return {"run_fn": properties["run_fn"], "examples": settings.examples,
            "transform_graph": settings.transform_graph, "serving_model_dir": f"{model_dir}/Format-Serving",
            "model_run_dir": f"{model_dir}/model_run",
            "train_steps": json.loads(properties["train_args"]).get("num_steps", 1),
            "eval_steps": json.loads(properties["eval_args"]).get("num_steps", 1),
            "custom_config": json.loads(properties["custom_config"])}


def _replica(job: dict, settings: TFJobSettings, replicas: int) -> dict:
    container: dict[str, Any] = {"name": CONTAINER, "image": settings.image,
                                 "command": ["python", "-m", settings.module],
                                 "args": ["--job", json.dumps(job, sort_keys=True)],
                                 "ports": [{"name": PORT_NAME, "containerPort": PORT}]}
    limits = {k: v for k, v in (("cpu", settings.cpu), ("memory", settings.memory)) if v}
    if limits:
        container["resources"] = {"requests": dict(limits), "limits": dict(limits)}
    container.update(json.loads(json.dumps(settings.pod.get("container") or {})))
    pod = {"containers": [container], **json.loads(json.dumps(settings.pod.get("pod") or {}))}
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    return {"replicas": replicas, "restartPolicy": "Never",
            "template": {"metadata": pod_metadata(), "spec": pod}}


def pod_metadata() -> dict:
    """What every pod the project creates carries: no Istio sidecar (see the module docstring)."""
    return {"labels": dict(NO_SIDECAR), "annotations": dict(NO_SIDECAR)}


def tfjob_manifest(job: dict, settings: TFJobSettings) -> dict:
    settings.check()
    replicas = {"Chief": _replica(job, settings, 1)}
    if settings.workers > 1:
        replicas["Worker"] = _replica(job, settings, settings.workers - 1)
    return {"apiVersion": API_VERSION, "kind": KIND,
            "metadata": {"name": settings.name, "namespace": settings.namespace},
            "spec": {"runPolicy": {"cleanPodPolicy": "Running"}, "tfReplicaSpecs": replicas}}


def write_manifest(manifest: dict, path: str) -> str:
    import os

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    from stackenv import text_out

    with open(path, "w", encoding="utf-8", errors=text_out.ERRORS) as handle:
        handle.write("# Generated by `python -m pipeline tfjob`; apply with `kubectl apply -f` "
                     "(needs the Kubeflow Training Operator).\n")
        yaml.safe_dump(manifest, handle, sort_keys=False)
    return path

"""The Trainer step of a pipeline compiled with ``--trainer-workers N``: train in a TFJob, not here.

Why a ``run_fn`` and not a new executor: TFX's Trainer executor (with the data facts filled in,
components/facts_steps.py) already resolves everything a training worker needs into ``FnArgs``
(split file patterns, transform graph, step budgets, tuned hyperparameters, and the output
URIs of this step's ``model`` and ``model_run`` artifacts). The Kubeflow compile makes this module's
:func:`run_fn` the Trainer's ``run_fn`` and keeps the family's own in ``custom_config["tfjob"]``;
this function turns ``FnArgs`` into the job of ``python -m pipeline.kubeflow.training.trainer_worker`` and starts
it as a Kubeflow Training Operator TFJob (pipeline/kubeflow/training/tfjob.py: Chief + N-1 Workers of the
pipeline image, TF_CONFIG set by the operator), or on a cluster with Kubeflow Trainer v2 instead a TrainJob of
the same topology (trainjob.py), through the Kubernetes API (pipeline/kubeflow/training/kube_api.py),
waits for the job's Succeeded or Failed condition (bounded by ``--trainer-job-timeout``), and
returns once the chief has written ``<model>/Format-Serving``: TFX then checks that model and
records the step's artifacts, so the Evaluator and the Pusher run unchanged.

The replicas' pod settings (image, ``--trainer-*`` resources, env, secrets, node selector,
tolerations, pull secrets) come from the step's environment (``TEMPLATE_ENV``, written by
``compile``: pipeline/kubeflow/training/tfjob_step.py), since the graph itself knows no image.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import time

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

LAUNCHER_RUN_FN = "pipeline.kubeflow.training.trainer_launcher.run_fn"
TFJOB_KEY = "tfjob"
TEMPLATE_ENV = "TFJOB_TEMPLATE"
POLL_S = 5.0

log = logging.getLogger("pipeline")


class TFJobFailed(ProjectError):
    """A step's TFJob failed, or did not finish in time; the step made nothing for the steps after it."""

    exit_code = EXIT_PIPELINE_FAILED


@dataclasses.dataclass(frozen=True)
class JobStep:
    """What the shared waiter says about the step that launched the job (the Trainer or the Tuner)."""

    step: str
    nothing_made: str
    workers_flag: str
    timeout_flag: str
    replicas_hint: str


TRAINER = JobStep("Trainer", "No model was trained, so nothing is evaluated or pushed",
                  "--trainer-workers", "--trainer-job-timeout",
                  "a worker that died stops the others within the multi-worker health checks "
                  "(models/common/multi_worker.py)")


def launcher_config(run_fn: str, custom_config: dict, workers: int, timeout_s: int) -> tuple[str, dict]:
    """The Trainer's ``run_fn`` and ``custom_config`` for a TFJob of ``workers`` pods (compile.py)."""
    return LAUNCHER_RUN_FN, {**custom_config, TFJOB_KEY: {"workers": workers, "run_fn": run_fn,
                                                          "timeout_seconds": timeout_s}}


def job_name(fn_args) -> str:
    """One TFJob per Trainer execution (its output URI), a DNS-1035 label: a restarted step finds its job."""
    family = re.sub(r"[^a-z0-9-]", "-", str(fn_args.custom_config.get("model_family", "model")).lower())
    digest = hashlib.sha256(fn_args.serving_model_dir.encode()).hexdigest()[:10]
    return f"{family.strip('-')[:30] or 'model'}-trainer-{digest}"


def worker_job(fn_args) -> dict:
    """What the training worker (trainer_worker.py) gets: the resolved FnArgs, the family's own run_fn."""
    custom = {key: value for key, value in fn_args.custom_config.items() if key != TFJOB_KEY}
    return {"run_fn": fn_args.custom_config[TFJOB_KEY]["run_fn"],
            "examples": os.path.dirname(os.path.dirname(fn_args.train_files[0])),
            "train_files": list(fn_args.train_files), "eval_files": list(fn_args.eval_files),
            "transform_graph": fn_args.transform_graph_path, "serving_model_dir": fn_args.serving_model_dir,
            "model_run_dir": fn_args.model_run_dir, "train_steps": int(fn_args.train_steps),
            "eval_steps": int(fn_args.eval_steps or 1), "custom_config": custom,
            "hyperparameters": fn_args.hyperparameters}


def replica_template_from_env(environ=os.environ, step: JobStep = TRAINER) -> dict:
    """The worker pod template that compile wrote into this step's environment (Trainer or Tuner)."""
    raw = environ.get(TEMPLATE_ENV)
    if not raw:
        raise TFJobFailed(
            f"The {step.step} step was compiled to run in a TFJob ({step.workers_flag}) but its pod has no "
            f"{TEMPLATE_ENV} environment variable, which `python -m pipeline compile` writes into the step's "
            "container with the image and pod settings of the workers. Recompile the package with this project's "
            "compile command and upload it again.")
    return json.loads(raw)


def tfjob_for(fn_args, api, template: dict) -> dict:
    """The training job of this execution, of the kind the cluster has (``api.kind``: TFJob or TrainJob)."""
    from pipeline.kubeflow.training.tfjob import TFJobSettings
    from pipeline.kubeflow.training.trainjob import job_manifest

    settings = TFJobSettings(
        image=template["image"], examples=fn_args.train_files[0],
        transform_graph=fn_args.transform_graph_path, model_dir=os.path.dirname(fn_args.serving_model_dir),
        workers=int(fn_args.custom_config[TFJOB_KEY]["workers"]), name=job_name(fn_args), namespace=api.namespace,
        service_account=api.service_account, pod=template, remote_only=False)
    return job_manifest(api.kind.kind, worker_job(fn_args), settings)


def _true_conditions(job: dict) -> dict[str, dict]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _logs_hint(namespace: str, name: str, kind: str = "TFJob") -> str:
    if kind == "TrainJob":  # JobSet labels its pods with the JobSet's (= the TrainJob's) name
        return (f"`kubectl logs -n {namespace} -l jobset.sigs.k8s.io/jobset-name={name} --prefix --tail=50` (pods "
                f"{name}-node-0-<i>, index 0 the chief), `kubectl describe trainjob {name} -n {namespace}`")
    return (f"`kubectl logs -n {namespace} -l training.kubeflow.org/job-name={name} --prefix --tail=50` (pods "
            f"{name}-chief-0, {name}-worker-<i>), `kubectl describe tfjob {name} -n {namespace}`")


def wait_for(api, name: str, timeout_s: float, poll_s: float = POLL_S, clock=time.monotonic,
             sleep=time.sleep, step: JobStep = TRAINER) -> dict:
    """The job once its Succeeded (TFJob) or Complete (TrainJob) condition is true; Failed or the deadline raise
    :class:`TFJobFailed`."""
    deadline, seen = clock() + timeout_s, set[str]()
    kind = getattr(getattr(api, "kind", None), "kind", "TFJob")
    done = getattr(getattr(api, "kind", None), "succeeded", "Succeeded")
    where = f"{kind} {api.namespace}/{name}"
    logs = _logs_hint(api.namespace, name, kind)
    while True:
        job = api.get(name)
        conditions = _true_conditions(job)
        for condition in sorted(set(conditions) - seen):
            log.info("%s: %s (%s)", where, condition, conditions[condition].get("message", ""))
            seen.add(condition)
        if "Failed" in conditions:
            counts = _replica_counts(job.get("status") or {})
            raise TFJobFailed(
                f"The {step.step}'s {where} failed: {conditions['Failed'].get('message', 'a replica failed')}"
                f"{f' ({counts})' if counts else ''}. {step.nothing_made}. "
                f"Read the pods' logs: {logs}; {step.replicas_hint}. Delete the {kind} "
                f"(`kubectl delete {kind.lower()} {name} -n {api.namespace}`) before re-running this step, which "
                "otherwise follows the same failed job.")
        if done in conditions:
            return job
        if clock() >= deadline:
            api.delete(name)
            raise TFJobFailed(
                f"The {step.step}'s {where} did not finish within {step.timeout_flag} {timeout_s:g} s (conditions "
                f"so far: {', '.join(sorted(conditions)) or 'none'}); the step deleted it, with its pods. Pods "
                "that stay Pending point at resources the cluster cannot give (the --trainer-* settings times "
                f"{step.workers_flag}) or a missing training operator; slow work at a larger timeout. Logs while "
                f"it runs: {logs}.")
        sleep(poll_s)


def _replica_counts(status: dict) -> str:
    """The pods' states as the job reports them: a TFJob's replicaStatuses, a TrainJob's jobsStatus."""
    if status.get("jobsStatus"):
        states = ("active", "succeeded", "failed")
        return ", ".join(f"{j['name']}: {', '.join(f'{j[k]} {k}' for k in states if j.get(k))}"
                         for j in status["jobsStatus"])
    replicas = status.get("replicaStatuses") or {}
    return ", ".join(f"{kind}: {', '.join(f'{n} {k}' for k, n in sorted(s.items()) if n)}"
                     for kind, s in sorted(replicas.items()))


def run_job(api, manifest: dict, timeout_s: float, step: JobStep, poll_s: float = POLL_S) -> dict:
    """Create (or follow, when a restarted step finds it) a TFJob and wait for it: the Trainer's and the Tuner's."""
    api.create(manifest)
    return wait_for(api, manifest["metadata"]["name"], timeout_s, poll_s, step=step)


def launch(fn_args, api, template: dict, poll_s: float = POLL_S) -> dict:
    """Create (or follow) this execution's TFJob, wait for it, check the chief's export."""
    import tensorflow as tf

    manifest = tfjob_for(fn_args, api, template)
    name = manifest["metadata"]["name"]
    workers = fn_args.custom_config[TFJOB_KEY]["workers"]
    log.info("Trainer: %s %s/%s, %d workers of %s", api.kind.kind, api.namespace, name, workers, template["image"])
    job = run_job(api, manifest, float(fn_args.custom_config[TFJOB_KEY]["timeout_seconds"]), TRAINER, poll_s)
    if not tf.io.gfile.exists(os.path.join(fn_args.serving_model_dir, "saved_model.pb")):
        raise TFJobFailed(
            f"The Trainer's {api.kind.kind} {api.namespace}/{name} succeeded but its chief wrote no model at "
            f"{fn_args.serving_model_dir}: the pods must write the pipeline root (workload identity, or the S3 "
            f"--s3-endpoint/--s3-secret settings at compile). Chief's log: "
            f"{_logs_hint(api.namespace, name, api.kind.kind)}.")
    return job


def run_fn(fn_args) -> None:
    """The Trainer's run_fn on Kubeflow with --trainer-workers: the training happens in the TFJob."""
    from pipeline.kubeflow.training.kube_api import connect

    launch(fn_args, connect(), replica_template_from_env())

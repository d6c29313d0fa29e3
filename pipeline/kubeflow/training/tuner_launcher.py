"""The Tuner step of a pipeline compiled with ``--tune-workers N``: run the trials in a TFJob, not here.

As for the Trainer (pipeline/kubeflow/training/trainer_launcher.py, whose TFJob client, manifest and waiter this
reuses): the Kubeflow compile (compile.py) makes this module's :func:`tuner_fn` the Tuner's ``tuner_fn`` and keeps the
family's own in ``custom_config["tfjob"]``. TFX's Tuner executor (components/tuner.py) resolves
the inputs into ``FnArgs`` and calls it; the returned tuner's ``search`` starts a TFJob (or, on a
cluster with Kubeflow Trainer v2 instead, a TrainJob of the same topology: trainjob.py) of one
Chief (the KerasTuner oracle: it serves trials, runs none) and N Workers (``tuner0``..: each
runs the family's trials), all ``python -m pipeline.kubeflow.training.tuner_worker`` (tuner_worker.py
derives KerasTuner's variables from the operator's TF_CONFIG), waits for it (bounded by
``--tune-job-timeout``), then reloads the chief's oracle from the shared search directory and
merges the workers' records. The executor then writes ``best_hyperparameters``,
``tuner_results.json`` and ``search.json`` from it exactly as after a search in its own pod,
so the Trainer consumes them unchanged.

The search directory is the executor's working directory, which components/tuner.py puts under
the ``tuner_results`` output when ``custom_config`` asks for a shared one: the pods share only
the pipeline root with the step.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from typing import Any

from pipeline.kubeflow.training.trainer_launcher import (
    TFJOB_KEY,
    JobStep,
    TFJobFailed,
    replica_template_from_env,
    run_job,
)

LAUNCHER_TUNER_FN = "pipeline.kubeflow.training.tuner_launcher.tuner_fn"
#: custom_config key: components/tuner.py gives the executor a working directory under tuner_results.
SHARED_WORKING_DIR_KEY = "shared_working_dir"

TUNER = JobStep("Tuner", "No search finished, so no hyperparameters reach the Trainer",
                "--tune-workers", "--tune-job-timeout",
                "the chief (the KerasTuner oracle) waits for every worker that took a trial, so a dead worker "
                "fails the job")

log = logging.getLogger("pipeline")


def launcher_config(tuner_fn: str, custom_config: dict, workers: int, timeout_s: int) -> tuple[str, dict]:
    """The Tuner's ``tuner_fn`` and ``custom_config`` for a TFJob of ``workers`` trial runners (compile.py)."""
    return LAUNCHER_TUNER_FN, {**custom_config, SHARED_WORKING_DIR_KEY: True,
                               TFJOB_KEY: {"workers": workers, "tuner_fn": tuner_fn, "timeout_seconds": timeout_s}}


def job_name(fn_args) -> str:
    """One TFJob per Tuner execution (its working directory), a DNS-1035 label: a restarted step finds its job."""
    family = re.sub(r"[^a-z0-9-]", "-", str(fn_args.custom_config.get("model_family", "model")).lower())
    digest = hashlib.sha256(fn_args.working_dir.encode()).hexdigest()[:10]
    return f"{family.strip('-')[:30] or 'model'}-tuner-{digest}"


def worker_job(fn_args) -> dict:
    """What the search worker (tuner_worker.py) gets: the resolved FnArgs, the family's own tuner_fn."""
    custom = {k: v for k, v in fn_args.custom_config.items() if k not in (TFJOB_KEY, SHARED_WORKING_DIR_KEY)}
    return {"tuner_fn": fn_args.custom_config[TFJOB_KEY]["tuner_fn"], "train_files": list(fn_args.train_files),
            "eval_files": list(fn_args.eval_files), "transform_graph": fn_args.transform_graph_path,
            "search_dir": fn_args.working_dir.rstrip("/"), "train_steps": int(fn_args.train_steps),
            "eval_steps": int(fn_args.eval_steps or 1), "custom_config": custom,
            "workers": int(fn_args.custom_config[TFJOB_KEY]["workers"])}


def tfjob_for(fn_args, api, template: dict) -> dict:
    """The search job of this execution, of the kind the cluster has (``api.kind``: TFJob or TrainJob)."""
    from pipeline.kubeflow.training.tfjob import TFJobSettings
    from pipeline.kubeflow.training.trainjob import job_manifest

    examples = os.path.dirname(os.path.dirname(fn_args.train_files[0]))
    settings = TFJobSettings(
        image=template["image"], examples=examples, transform_graph=fn_args.transform_graph_path,
        model_dir=fn_args.working_dir, workers=1 + int(fn_args.custom_config[TFJOB_KEY]["workers"]),
        name=job_name(fn_args), namespace=api.namespace, service_account=api.service_account, pod=template,
        remote_only=False, module="pipeline.kubeflow.training.tuner_worker")
    return job_manifest(api.kind.kind, worker_job(fn_args), settings)


class TFJobTuner:
    """What TFX's Tuner executor needs of a tuner (``search``, ``oracle``, best hyperparameters, and the
    attributes components/tuner.py records), for a search that ran in a TFJob."""

    tuner_id = "tfjob-launcher"

    def __init__(self, fn_args, api=None, template: dict | None = None, poll_s: float | None = None):
        self.fn_args, self.api, self.template, self.poll_s = fn_args, api, template, poll_s
        self.oracle: Any = None  # a keras_tuner Oracle, once the job's search is loaded
        self.trial_seconds: dict[str, float] = {}
        self.trials_by_tuner: dict[str, int] = {}
        self.default_score = self.default_seconds = self.budget_seconds = None
        self.stopped_by_budget = False

    def search(self, **_):
        from pipeline.kubeflow.training.kube_api import connect
        from pipeline.kubeflow.training.trainer_launcher import POLL_S

        api = self.api or connect()
        template = self.template or replica_template_from_env(step=TUNER)
        manifest = tfjob_for(self.fn_args, api, template)
        workers = self.fn_args.custom_config[TFJOB_KEY]["workers"]
        log.info("Tuner: %s %s/%s, an oracle and %d trial workers of %s", api.kind.kind, api.namespace,
                 manifest["metadata"]["name"], workers, template["image"])
        run_job(api, manifest, float(self.fn_args.custom_config[TFJOB_KEY]["timeout_seconds"]), TUNER,
                self.poll_s or POLL_S)
        self._load(api.namespace, manifest["metadata"]["name"])

    def _load(self, namespace: str, name: str) -> None:
        import tensorflow as tf

        from models.common.tuner import TuningSettings, make_oracle
        from pipeline.kubeflow.training.tuner_worker import CHIEF_ID, RECORDS

        search_dir = self.fn_args.working_dir.rstrip("/")
        oracle = make_oracle(TuningSettings.from_custom_config(self.fn_args.custom_config), [])
        oracle._set_project_dir(os.path.join(search_dir, CHIEF_ID), "search")
        if not tf.io.gfile.exists(oracle._get_oracle_fname()):
            raise TFJobFailed(
                f"The Tuner's training job {namespace}/{name} succeeded but its chief wrote no oracle at "
                f"{oracle._get_oracle_fname()}: the pods must write the pipeline root (workload identity, or the "
                f"S3 --s3-endpoint/--s3-secret settings at compile). Chief's log: `kubectl logs -n {namespace} "
                f"{name}-chief-0` (a TrainJob: {name}-node-0-0).")
        oracle.reload()
        self.oracle = oracle
        for path in sorted(tf.io.gfile.glob(os.path.join(search_dir, RECORDS, "*.json"))):
            record = json.loads(tf.io.gfile.GFile(path).read())
            self.trial_seconds.update(record["trial_seconds"])
            self.trials_by_tuner[record["tuner_id"]] = len(record["trial_seconds"])
            self.stopped_by_budget |= bool(record["stopped_by_budget"])
            self.budget_seconds = record["budget_seconds"]
            if record["default_score"] is not None:
                self.default_score, self.default_seconds = record["default_score"], record["default_seconds"]
        if not self.get_best_hyperparameters():
            raise TFJobFailed(
                f"The Tuner's training job {namespace}/{name} succeeded but completed no trial (trials per worker: "
                f"{self.trials_by_tuner or 'no worker records'}), so there are no best hyperparameters. Read the "
                f"workers' logs: `kubectl logs -n {namespace} -l training.kubeflow.org/job-name={name} --prefix`.")
        log.info("Tuner: trials per worker %s", self.trials_by_tuner)

    def get_best_hyperparameters(self, num_trials: int = 1):
        return [trial.hyperparameters for trial in self.oracle.get_best_trials(num_trials)]


def tuner_fn(fn_args):
    """The Tuner's tuner_fn on Kubeflow with --tune-workers: the trials run in the TFJob."""
    from tfx.components.tuner.component import TunerFnResult

    return TunerFnResult(tuner=TFJobTuner(fn_args), fit_kwargs={})

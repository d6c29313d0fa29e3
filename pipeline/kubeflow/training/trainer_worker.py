"""One training worker of a TFJob pod: the family's real ``run_fn`` on a finished Transform's outputs.

``python -m pipeline.kubeflow.training.trainer_worker --job JSON`` (the command kubeflow/tfjob.yaml gives every
replica, pipeline/kubeflow/training/tfjob.py). JSON holds what TFX's Trainer executor would put into
``FnArgs``: the URIs of the examples the family's Trainer reads and of the transform graph of a pipeline run, where the
model goes, the step counts and the Trainer's ``custom_config`` (strategy ``multi_worker``).
The training operator sets ``TF_CONFIG`` in each pod; ``models/common/multi_worker.py`` reads it,
and the chief alone writes ``serving_model_dir``. A :class:`ProjectError` ends the pod with its
paragraph and exit code, so ``kubectl logs`` shows the message, not a traceback.
"""
import argparse
import json
import os
import sys

import stackenv  # noqa: F401  (first: tf-keras before TensorFlow loads)
from stackenv.compat import exit_skipping_teardown
from stackenv.errors import ProjectError

#: Keys of the job JSON, all required.
JOB_KEYS = ("run_fn", "examples", "transform_graph", "serving_model_dir", "model_run_dir",
            "train_steps", "eval_steps", "custom_config")


def fn_args(job: dict):
    """The ``FnArgs`` TFX's Trainer executor builds for these artifacts (splits as Split-<name>/*)."""
    from tfx.components.trainer.fn_args_utils import FnArgs

    missing = [key for key in JOB_KEYS if key not in job]
    if missing:
        raise ValueError(f"trainer_worker job lacks {missing}; regenerate it with `python -m pipeline tfjob`")
    examples = job["examples"].rstrip("/")
    # The Trainer step's launcher (pipeline/kubeflow/training/trainer_launcher.py) passes the file patterns and the
    # tuned hyperparameters TFX's executor resolved; `tfjob` names the artifact directory only.
    return FnArgs(
        train_files=job.get("train_files") or [os.path.join(examples, "Split-train", "*")],
        eval_files=job.get("eval_files") or [os.path.join(examples, "Split-eval", "*")],
        hyperparameters=job.get("hyperparameters"),
        transform_output=job["transform_graph"], transform_graph_path=job["transform_graph"],
        serving_model_dir=job["serving_model_dir"], model_run_dir=job["model_run_dir"],
        train_steps=int(job["train_steps"]), eval_steps=int(job["eval_steps"]),
        custom_config=job["custom_config"], data_accessor=None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.training.trainer_worker", allow_abbrev=False)
    parser.add_argument("--job", required=True, help="the job as JSON (written by `python -m pipeline tfjob`)")
    text = parser.parse_args(argv).job
    job = json.loads(text)
    from pipeline.kubeflow.bundled_store import prepare_pod_storage
    from pipeline.kubeflow.training.trainjob import ensure_tf_config

    try:
        prepare_pod_storage(text)  # the Trainer step's store: its endpoint and s3:// for TensorFlow
        ensure_tf_config()  # a TrainJob pod: TF_CONFIG from the cluster spec and the pod's index
    except ProjectError as error:
        print(error.paragraph, file=sys.stderr)
        return error.exit_code
    from pipeline.families import load_function

    try:
        load_function(job["run_fn"])(fn_args(job))
    except ProjectError as error:
        print(error.paragraph, file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    # Not sys.exit: once tensorflow-io's S3 client was used, interpreter teardown aborts (exit 134),
    # which with restartPolicy Never fails the chief pod, the job and the step after the model was written.
    exit_skipping_teardown(main())

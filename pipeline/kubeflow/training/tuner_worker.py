"""One process of the Tuner's TFJob (``compile --tune-workers N``): the KerasTuner oracle, or a trial runner.

``python -m pipeline.kubeflow.training.tuner_worker --job JSON``, the command tuner_launcher.py gives
every replica. The Training Operator sets ``TF_CONFIG`` in each pod (pipeline/kubeflow/training/tfjob.py
cites its source); KerasTuner's distributed mode wants ``KERASTUNER_TUNER_ID`` /
``KERASTUNER_ORACLE_IP`` / ``KERASTUNER_ORACLE_PORT`` instead, which :func:`keras_tuner_env`
derives from it: the Chief serves the oracle (and runs no trials: KerasTuner's chief only
serves), Worker ``i`` is ``tuner<i>`` and reaches the oracle at the chief's address from the
cluster spec. The oracle listens on that address's port, the operator's ``tfjob-port``
(2222): the chief runs no TensorFlow server, and the operator's headless service makes the
port reachable, so no extra port or service is needed.

Then the family's own ``tuner_fn`` runs exactly as in TFX's Tuner executor, with a working
directory per replica under the shared search directory; each trial runner also writes
``records/<tuner_id>.json`` (its trials' seconds, the untuned score ``tuner0`` measures, whether
the budget stopped it), which the launcher merges into the Tuner's ``search.json``, and by
which the chief knows that runners stopped by ``--tune-budget`` are done (:func:`serve`).
"""
import argparse
import json
import os
import sys

import stackenv  # noqa: F401  (first: tf-keras before TensorFlow loads)
from stackenv import compat
from stackenv.compat import exit_skipping_teardown
from stackenv.errors import ProjectError

#: Keys of the job JSON, all required.
JOB_KEYS = ("tuner_fn", "train_files", "eval_files", "transform_graph", "search_dir", "train_steps",
            "eval_steps", "custom_config", "workers")
RECORDS = "records"
CHIEF_ID = "chief"
#: The chief binds every interface: its cluster DNS name is what the others dial.
BIND_ALL = "0.0.0.0"


class TunerWorkerError(ProjectError):
    """A Tuner pod cannot tell its role from TF_CONFIG."""


def keras_tuner_env(tf_config: str) -> dict[str, str]:
    """KerasTuner's distributed-mode variables for this pod, from the operator's ``TF_CONFIG``."""
    try:
        spec = json.loads(tf_config or "")
        chief = spec["cluster"]["chief"][0]
        kind, index = spec["task"]["type"], int(spec["task"]["index"])
    except (ValueError, KeyError, IndexError, TypeError) as error:
        raise TunerWorkerError(
            f"The Tuner's TFJob pod has no usable TF_CONFIG ({type(error).__name__}: {error}): a replica of the "
            "Tuner step's TFJob needs the Training Operator's cluster spec with one chief, which the operator "
            "sets in every pod it creates. Run the job through the operator (compile --tune-workers), not as a "
            "bare pod.") from None
    host, _, port = chief.rpartition(":")
    if kind == "chief":
        return {"KERASTUNER_TUNER_ID": CHIEF_ID, "KERASTUNER_ORACLE_IP": BIND_ALL, "KERASTUNER_ORACLE_PORT": port}
    return {"KERASTUNER_TUNER_ID": f"tuner{index}", "KERASTUNER_ORACLE_IP": host, "KERASTUNER_ORACLE_PORT": port}


def fn_args(job: dict, tuner_id: str):
    """The ``FnArgs`` TFX's Tuner executor builds, with a working directory of this replica's own."""
    from tfx.components.trainer.fn_args_utils import FnArgs

    missing = [key for key in JOB_KEYS if key not in job]
    if missing:
        raise ValueError(f"tuner_worker job lacks {missing}; recompile with `python -m pipeline compile`")
    return FnArgs(train_files=job["train_files"], eval_files=job["eval_files"],
                  transform_output=job["transform_graph"], transform_graph_path=job["transform_graph"],
                  working_dir=os.path.join(job["search_dir"], tuner_id), train_steps=int(job["train_steps"]),
                  eval_steps=int(job["eval_steps"]), custom_config=job["custom_config"], data_accessor=None)


def record(tuner) -> dict:
    """What a trial runner reports for ``search.json`` (components/tuner.py reads the same attributes)."""
    return {"tuner_id": tuner.tuner_id, "trial_seconds": dict(getattr(tuner, "trial_seconds", {}) or {}),
            "default_score": getattr(tuner, "default_score", None),
            "default_seconds": getattr(tuner, "default_seconds", None),
            "budget_seconds": getattr(tuner, "budget_seconds", None),
            "stopped_by_budget": bool(getattr(tuner, "stopped_by_budget", False))}


def serve(result, job: dict, poll_s: float = 2.0) -> None:
    """Serve the oracle until KerasTuner's chief ends, or every trial runner wrote its record.

    KerasTuner's chief ends once a runner was told "no more trials" and none is busy; runners
    that stop on ``--tune-budget`` never ask again, so their records are the other way out.
    """
    import threading

    import tensorflow as tf

    server = threading.Thread(target=result.tuner.search, kwargs=result.fit_kwargs, daemon=True)
    server.start()
    pattern = os.path.join(job["search_dir"], RECORDS, "*.json")
    while server.is_alive() and len(tf.io.gfile.glob(pattern)) < int(job["workers"]):
        server.join(poll_s)
    result.tuner.oracle.save()


def search(job: dict, environ=os.environ) -> dict:
    from tfx.utils import io_utils

    from pipeline.families import load_function
    from pipeline.kubeflow.training.trainjob import ensure_tf_config

    ensure_tf_config(environ)  # a TrainJob pod: TF_CONFIG from the cluster spec and the pod's index
    environ.update(keras_tuner_env(environ.get("TF_CONFIG", "")))
    tuner_id = environ["KERASTUNER_TUNER_ID"]
    result = load_function(job["tuner_fn"])(fn_args(job, tuner_id))
    if tuner_id == CHIEF_ID:
        serve(result, job)
        return {"tuner_id": tuner_id}
    result.tuner.search(**result.fit_kwargs)
    report = record(result.tuner)
    io_utils.write_string_file(os.path.join(job["search_dir"], RECORDS, f"{tuner_id}.json"), json.dumps(report))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.kubeflow.training.tuner_worker", allow_abbrev=False)
    parser.add_argument("--job", required=True, help="the job as JSON (written by the Tuner step's launcher)")
    text = parser.parse_args(argv).job
    job = json.loads(text)
    from pipeline.kubeflow.bundled_store import prepare_pod_storage

    try:
        prepare_pod_storage(text)  # the Tuner step's store: its endpoint and s3:// for TensorFlow
        report = search(job)
        print(json.dumps(report), flush=True)
        if report["tuner_id"] == CHIEF_ID:
            compat.remove_autograph_sources()  # their atexit handler will not run
            sys.stderr.flush()
            # KerasTuner gives no handle on the oracle's gRPC server, which may still be serving
            # when runners stopped by the budget ended the search: end the process, not just main.
            os._exit(0)
    except ProjectError as error:
        print(error.paragraph, file=sys.stderr)
        return error.exit_code
    return 0


if __name__ == "__main__":
    # Not sys.exit: once tensorflow-io's S3 client was used, interpreter teardown aborts (exit 134),
    # which with restartPolicy Never fails the chief pod, the job and the step after the model was written.
    exit_skipping_teardown(main())

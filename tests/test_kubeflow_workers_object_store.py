"""Two training workers of a TFJob on KFP's bundled object store: they find it and end cleanly.

The replicas run ``python -m pipeline.kubeflow.training.trainer_worker`` (the command the compiled
Trainer step gives each of them, pipeline/kubeflow/training/tfjob.py) with the pod environment
``compile --trainer-workers 2`` gives them on a ``minio://`` root (the store's marker and its
secret's keys, no endpoint: pipeline/kubeflow/training/tfjob_step.py), a TF_CONFIG cluster on this
machine, and every path on a real local S3 server (moto's). A worker must find the store's Service
as a step does (pipeline/kubeflow/bundled_store.py), read s3:// through tensorflow-io, and exit 0:
once tensorflow-io's S3 client was used, interpreter teardown aborts (exit 134), which with
``restartPolicy: Never`` fails the chief pod and the TFJob after the model was written.
"""
import json
import os
import subprocess
import sys

import pytest
from conftest import DIGIT_FACTS, PROJECT_ROOT, free_ports
from support import s3_server

from pipeline.config import PipelineConfig
from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.compile import compile_pipeline, store_settings
from pipeline.kubeflow.platform import StepSettings
from pipeline.kubeflow.training.tfjob_step import replica_template

BUCKET = "mlpipeline"


def _upload(address: str, local: str, prefix: str) -> str:
    client = s3_server.client(address)
    for folder, _, names in os.walk(local):
        for name in names:
            path = os.path.join(folder, name)
            client.upload_file(path, BUCKET, f"{prefix}/{os.path.relpath(path, local)}")
    return f"s3://{BUCKET}/{prefix}"


def test_compiled_worker_pods_on_a_minio_root_get_the_stores_marker_and_keys():
    """What `compile --trainer-workers 2 --pipeline-root minio://...` gives the replicas (was: keys, no endpoint)."""
    settings = store_settings(StepSettings(), "minio://mlpipeline/tfx")
    env = {item["name"]: item for item in replica_template("image:1", settings)["container"]["env"]}
    assert env[bundled_store.MARKER]["value"] == bundled_store.MARKER_VALUE
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {"name": bundled_store.SECRET, "key": "accesskey"}
    assert "S3_ENDPOINT" not in env  # found in the pod, as the steps find it


def _pod_env(address: str) -> dict[str, str]:
    """The pod as a standalone install's kubeflow namespace gives it: the store's Service env, the secret's keys."""
    host, port = address.rsplit(":", 1)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    return {**base, "PYTHONPATH": str(PROJECT_ROOT), bundled_store.MARKER: bundled_store.MARKER_VALUE,
            "MINIO_SERVICE_SERVICE_HOST": host, "MINIO_SERVICE_SERVICE_PORT": port,
            "AWS_ACCESS_KEY_ID": s3_server.BUNDLED_KEYS["accesskey"],
            "AWS_SECRET_ACCESS_KEY": s3_server.BUNDLED_KEYS["secretkey"]}


def _run_replicas(module: str, job: dict, address: str, folder, roles=("chief", "worker")) -> list[tuple[int, str]]:
    """Start one process per replica of ``module`` under a TF_CONFIG cluster; (exit code, stderr) of each."""
    ports = free_ports(len(roles))
    cluster: dict[str, list[str]] = {}
    for role, port in zip(roles, ports):
        cluster.setdefault(role, []).append(f"localhost:{port}")
    tasks = [{"type": role, "index": roles[:at].count(role)} for at, role in enumerate(roles)]
    workers = [subprocess.Popen(
        [sys.executable, "-m", module, "--job", json.dumps(job)], cwd=folder, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env={**_pod_env(address), "TF_CONFIG": json.dumps({"cluster": cluster, "task": task})})
        for task in tasks]
    results = []
    try:
        for worker in workers:
            _, err = worker.communicate(timeout=600)
            results.append((worker.returncode, err))
    finally:
        for worker in workers:
            worker.kill()
    return results


def _uploaded_digits(address: str, trainer_digits: dict) -> tuple[str, str]:
    examples = _upload(address, os.path.dirname(os.path.dirname(trainer_digits["train_files"][0])),
                       "run/ImportExampleGen/examples")
    return examples, _upload(address, trainer_digits["transform_output"], "run/Transform/transform_graph")


@pytest.mark.timeout(900)
def test_two_workers_train_on_the_bundled_store_and_exit_cleanly(trainer_digits, tmp_path):
    from models.common.training import TrainingSettings

    with s3_server.s3_server(BUCKET) as address:
        examples, graph = _uploaded_digits(address, trainer_digits)
        settings = TrainingSettings(strategy="multi_worker", batch_size=16, learning_rate=3e-3, epochs=1)
        job = {"run_fn": "models.cnn.trainer.run_fn", "examples": examples, "transform_graph": graph,
               "train_files": [f"{examples}/Split-train/data.gz"],
               "eval_files": [f"{examples}/Split-eval/data.gz"],
               "serving_model_dir": f"s3://{BUCKET}/run/Trainer/model/Format-Serving",
               "model_run_dir": f"s3://{BUCKET}/run/Trainer/model_run",
               "train_steps": 4, "eval_steps": 2, "custom_config": {**settings.to_custom_config(), **DIGIT_FACTS}}
        for code, err in _run_replicas("pipeline.kubeflow.training.trainer_worker", job, address, tmp_path):
            assert code == 0, err[-4000:]  # not 134: no teardown abort after the S3 client was used
        saved = s3_server.keys(address, BUCKET, "run/Trainer/model/Format-Serving/")
        assert "run/Trainer/model/Format-Serving/saved_model.pb" in saved


@pytest.mark.timeout(900)
def test_the_tuners_oracle_and_trial_runner_search_on_the_bundled_store_and_exit_cleanly(trainer_digits,
                                                                                      tmp_path):
    """The Tuner's TFJob (compile --tune-workers 2): the chief serves the oracle, tuner0 and tuner1 run the
    trials, all on s3:// paths of the bundled store; each runner records its end there, and all exit 0."""
    import yaml
    from tfx.components.trainer.fn_args_utils import FnArgs

    from pipeline.kubeflow.training.tuner_launcher import worker_job

    config = PipelineConfig(model="cnn", output_dir="minio://mlpipeline/tfx", tune_trials=2, tune_workers=2,
                            train_steps=4)
    spec = next(yaml.safe_load_all(open(compile_pipeline(config, None, "image:1", str(tmp_path / "p.yaml")))))
    custom = json.loads(spec["root"]["dag"]["tasks"]["Tuner"]["inputs"]["parameters"]["custom_config"][
        "runtimeValue"]["constant"])
    custom.update(DIGIT_FACTS)  # what the Tuner step hands over from the Transform graph's properties
    with s3_server.s3_server(BUCKET) as address:
        examples, graph = _uploaded_digits(address, trainer_digits)
        search = f"s3://{BUCKET}/run/Tuner/search"
        job = worker_job(FnArgs(train_files=[f"{examples}/Split-train/data.gz"],
                                eval_files=[f"{examples}/Split-eval/data.gz"],
                                transform_graph_path=graph, working_dir=search, train_steps=4, eval_steps=2,
                                custom_config=custom))
        for code, err in _run_replicas("pipeline.kubeflow.training.tuner_worker", job, address, tmp_path,
                                       roles=("chief", "worker", "worker")):
            assert code == 0, err[-4000:]
        records = {key for key in s3_server.keys(address, BUCKET, "run/Tuner/search/records/")}
        assert records == {"run/Tuner/search/records/tuner0.json", "run/Tuner/search/records/tuner1.json"}

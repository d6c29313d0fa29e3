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
from conftest import PROJECT_ROOT, free_ports
from support import s3_server

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.compile import store_settings
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


@pytest.mark.timeout(900)
def test_two_workers_train_on_the_bundled_store_and_exit_cleanly(transformed_digits, tmp_path):
    from models.common.training import TrainingSettings

    with s3_server.s3_server(BUCKET) as address:
        host, port = address.rsplit(":", 1)
        examples = _upload(address, os.path.dirname(transformed_digits["train_files"][0]), "run/Transform/examples")
        graph = _upload(address, transformed_digits["transform_output"], "run/Transform/transform_graph")
        settings = TrainingSettings(strategy="multi_worker", batch_size=16, learning_rate=3e-3, epochs=1,
                                    family={"image_shape": [8, 8, 1]})
        serving = f"s3://{BUCKET}/run/Trainer/model/Format-Serving"
        job = {"run_fn": "models.cnn.trainer.run_fn", "transformed_examples": examples, "transform_graph": graph,
               "train_files": [f"{examples}/train.gz"], "eval_files": [f"{examples}/eval.gz"],
               "serving_model_dir": serving, "model_run_dir": f"s3://{BUCKET}/run/Trainer/model_run",
               "train_steps": 4, "eval_steps": 2, "custom_config": settings.to_custom_config()}
        cluster = {"chief": [f"localhost:{free_ports(1)[0]}"], "worker": [f"localhost:{free_ports(1)[0]}"]}
        # The pod as a standalone install's kubeflow namespace gives it: the store's Service env, the secret's keys.
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
        pod_env = {**base, "PYTHONPATH": str(PROJECT_ROOT), bundled_store.MARKER: bundled_store.MARKER_VALUE,
                   "MINIO_SERVICE_SERVICE_HOST": host, "MINIO_SERVICE_SERVICE_PORT": port,
                   "AWS_ACCESS_KEY_ID": s3_server.BUNDLED_KEYS["accesskey"],
                   "AWS_SECRET_ACCESS_KEY": s3_server.BUNDLED_KEYS["secretkey"]}
        workers = [subprocess.Popen(
            [sys.executable, "-m", "pipeline.kubeflow.training.trainer_worker", "--job", json.dumps(job)],
            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**pod_env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}})})
            for role in ("chief", "worker")]
        results = []
        try:
            for worker in workers:
                out, err = worker.communicate(timeout=600)
                results.append((worker.returncode, err))
        finally:
            for worker in workers:
                worker.kill()
        for code, err in results:
            assert code == 0, err[-4000:]  # not 134: no teardown abort after the S3 client was used
        saved = s3_server.keys(address, BUCKET, "run/Trainer/model/Format-Serving/")
        assert "run/Trainer/model/Format-Serving/saved_model.pb" in saved

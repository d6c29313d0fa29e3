"""The pipeline on an S3 root (MinIO, KFP's own store, speaks S3): every step, two runs.

A local S3-compatible server (moto's, from PyPI) plays MinIO. The root, every artifact,
the serving directory, the Evaluator's served-model baseline and the Pusher's new version
all live in the bucket; the steps get the endpoint and keys from the environment, as a pod
gets them from a Kubernetes secret (kubeflow/README.md, "Storage").
"""
import json
import os

import boto3
import pytest
from moto.server import ThreadedMotoServer
from support.kfp_contract import Cluster, topological_tasks
from test_kubeflow_contract import compile_for_contract

from pipeline.kubeflow.storage import s3_environment

# Two full runs, see test_kubeflow_contract.py.
pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3600)]

BUCKET = "mlpipeline"
KEYS = {"AWS_ACCESS_KEY_ID": "minio", "AWS_SECRET_ACCESS_KEY": "minio123"}


@pytest.fixture(scope="module")
def s3_endpoint():
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys()).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


def _keys():
    return {"aws_access_key_id": KEYS["AWS_ACCESS_KEY_ID"], "aws_secret_access_key": KEYS["AWS_SECRET_ACCESS_KEY"]}


def _objects(endpoint: str, prefix: str) -> list:
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", **_keys())
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]


def _versions(endpoint: str, serving_prefix: str) -> list:
    keys = _objects(endpoint, serving_prefix + "/")
    return sorted({int(k.split("/")[-2]) for k in keys
                   if k.endswith("/saved_model.pb") and k.split("/")[-2].isdigit()})


def test_kfp_contract_on_s3_root_runs_twice_and_pushes(s3_endpoint, tmp_path):
    root = f"s3://{BUCKET}/v2"
    spec, config, image_paths = compile_for_contract("cnn", tmp_path, root=root)
    assert spec["defaultPipelineRoot"] == f"{root}/tfx"
    env = {**s3_environment(s3_endpoint), **KEYS}
    cluster = Cluster(str(tmp_path), image_paths=image_paths, env=env)  # no local-root allowance
    serving_prefix = config.serving_model_dir[len(f"s3://{BUCKET}/"):]
    runs, versions = [], []
    for run_id in ("run-1", "run-2"):
        runs.append(cluster.run(spec, run_id=run_id, runtime_root=spec["defaultPipelineRoot"]))
        versions.append(_versions(s3_endpoint, serving_prefix))
    assert len(versions[0]) == 1 and len(versions[1]) == 2, versions
    for produced in runs:
        assert list(produced) == topological_tasks(spec)
        assert all(a["uri"].startswith(f"{root}/tfx/cnn-pipeline/") for t in produced.values() for a in t.values())
        assert produced["Evaluator"]["blessing"]["metadata"]["blessed"] == 1.0
    model_keys = _objects(s3_endpoint, "v2/tfx/cnn-pipeline/run-2/Trainer/model/")
    assert any(k.endswith("Format-Serving/saved_model.pb") for k in model_keys)
    # The second run's baseline was the version the first run pushed, read from the bucket.
    second = runs[1]["Evaluator"]["blessing"]["metadata"]
    assert second["baseline_model_uri"] == f"{config.serving_model_dir}/{versions[0][0]}"
    push_info = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", **_keys()).get_object(
        Bucket=BUCKET, Key=f"{serving_prefix}/{versions[1][-1]}/push_info.json")["Body"].read()
    assert json.loads(push_info)["version"] == versions[1][-1]
    assert not os.path.exists("/s3")  # nothing went through a local mount path

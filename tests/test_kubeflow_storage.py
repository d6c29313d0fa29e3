"""Which roots a KFP step can write, and the S3 environment the steps get, proven against a local S3 server."""
import json
import subprocess
import sys
import uuid

import pytest
from conftest import PROJECT_ROOT
from support import s3_server as local_s3
from support.kfp_contract import DEFAULT_PIPELINE_ROOT, LAUNCHER_SCHEMES

from pipeline.kubeflow.storage import (
    DEFAULT_KFP_ROOT,
    WRITABLE_SCHEMES,
    KubeflowConfigError,
    check_pipeline_root,
    check_s3_root,
    s3_environment,
)


def test_writable_schemes_are_ones_the_launcher_maps():
    """A root must be a scheme KFP's launcher accepts (launcher_v2.go localPathForURI) and TFX can write
    (minio://: as s3://, pipeline/kubeflow/bundled_store.py)."""
    assert {f"{s}://" for s in WRITABLE_SCHEMES} <= set(LAUNCHER_SCHEMES)
    assert DEFAULT_KFP_ROOT == DEFAULT_PIPELINE_ROOT  # config/env.go
    for root in ("gs://bucket/tfx", "s3://mlpipeline/v2/tfx", DEFAULT_KFP_ROOT):
        check_pipeline_root(root, "test")


def test_an_s3_root_needs_an_endpoint():
    with pytest.raises(KubeflowConfigError, match="no --s3-endpoint was given") as caught:
        check_s3_root("s3://team/tfx", None, "compile --pipeline-root")
    assert "minio://team/..." in str(caught.value) and "kfp-launcher" in str(caught.value)
    check_s3_root("s3://team/tfx", "http://ceph-rgw.storage:7480", "compile")
    check_s3_root("minio://mlpipeline/tfx", None, "compile")


@pytest.mark.parametrize("root, expected", [
    ("/abs/path", "is a local path"),
    ("file:///x", "is a local path"),
    ("https://example.com/x", "uses https://"),
    ("s3://", "names no bucket"),
])
def test_unwritable_roots_are_one_paragraph(root, expected):
    with pytest.raises(KubeflowConfigError) as caught:
        check_pipeline_root(root, "compile --pipeline-root")
    message = str(caught.value)
    assert message.startswith("compile --pipeline-root: ") and expected in message and "\n" not in message
    assert "Pass e.g. --pipeline-root gs://" in message


# Run in a child: importing tensorflow-io into pytest aborts the interpreter at exit ("pure virtual
# method called", commit 1feb6d4), so the child reports on stdout and leaves with os._exit.
_ROUND_TRIP = """
import json, os, sys
import stackenv
import apache_beam as beam
import tensorflow as tf
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions
from pipeline.kubeflow.storage import register_filesystems

bucket = sys.argv[1]
register_filesystems(bucket)
with tf.io.gfile.GFile(bucket + "/by-tf/model.txt", "w") as handle:
    handle.write("written by tf.io.gfile")
# A Beam pipeline writes, as TFX's Beam steps do (Pipeline hands its options to FileSystems).
with beam.Pipeline(options=PipelineOptions([])) as pipeline:
    _ = (pipeline | beam.Create(["written by Beam"])
         | beam.io.WriteToText(bucket + "/by-beam/data.txt", num_shards=1, shard_name_template=""))
with FileSystems.open(bucket + "/by-tf/model.txt") as handle:
    beam_read = handle.read().decode()
with tf.io.gfile.GFile(bucket + "/by-beam/data.txt") as handle:
    tf_read = handle.read()
print(json.dumps({"beam_read": beam_read, "tf_read": tf_read,
                  "tf_listing": sorted(tf.io.gfile.listdir(bucket))}), flush=True)
os._exit(0)
"""


@pytest.fixture
def s3_server():
    """A local S3 server (moto's, from PyPI) with a bucket, as MinIO serves KFP's store."""
    with local_s3.s3_server("mlpipeline") as address:
        yield f"http://{address}", local_s3.client(address)


def test_s3_environment_lets_tensorflow_and_beam_read_and_write_the_bucket(s3_server, tmp_path):
    """The variables are proven by use: with only ``s3_environment`` and the keys (as a step gets
    them), TensorFlow's filesystem (tensorflow-io, or stackenv/s3_filesystem on tfx-1.21) and Beam's
    (boto3) each write an object the other reads, and the S3 server itself holds both."""
    endpoint, client = s3_server
    assert endpoint.startswith("http://")  # MinIO inside a cluster: no TLS
    env = local_s3.process_env(endpoint, home=str(tmp_path))
    # moto keeps one store per process, shared by every server a test starts: a folder of this test's own.
    folder = f"v2-{uuid.uuid4().hex[:8]}"
    child = subprocess.run([sys.executable, "-c", _ROUND_TRIP, f"s3://mlpipeline/{folder}"], env=env,
                           cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["beam_read"] == "written by tf.io.gfile" and result["tf_read"] == "written by Beam\n"
    assert sorted(entry.rstrip("/") for entry in result["tf_listing"]) == ["by-beam", "by-tf"]
    stored = {item["Key"] for item in client.list_objects_v2(Bucket="mlpipeline", Prefix=folder)["Contents"]}
    assert stored == {f"{folder}/by-tf/model.txt", f"{folder}/by-beam/data.txt"}


def test_s3_environment_follows_the_endpoint_scheme_and_the_region():
    """https (AWS itself) turns TLS on for TensorFlow's s3://; the region comes from the environment."""
    aws = s3_environment("https://s3.eu-west-1.amazonaws.com", environ={"AWS_REGION": "eu-west-1"})
    assert (aws["S3_USE_HTTPS"], aws["S3_VERIFY_SSL"], aws["AWS_REGION"]) == ("1", "1", "eu-west-1")
    assert s3_environment("http://minio:9000", environ={})["AWS_REGION"] == "us-east-1"

"""Which roots a KFP step can write, and the S3 environment the steps get (no TFX, no cluster)."""
import pytest
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


def test_s3_environment_for_minio_and_aws():
    minio = s3_environment("http://minio-service.kubeflow:9000", environ={})
    assert minio == {"AWS_ENDPOINT_URL": "http://minio-service.kubeflow:9000",
                     "S3_ENDPOINT": "http://minio-service.kubeflow:9000", "S3_USE_HTTPS": "0",
                     "S3_VERIFY_SSL": "0", "AWS_REGION": "us-east-1"}
    aws = s3_environment("https://s3.eu-west-1.amazonaws.com", environ={"AWS_REGION": "eu-west-1"})
    assert aws["S3_USE_HTTPS"] == "1" and aws["AWS_REGION"] == "eu-west-1"

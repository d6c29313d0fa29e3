"""A real local S3 server (moto's, from PyPI) playing KFP's bundled store and other S3 endpoints."""
import contextlib
from collections.abc import Iterator

import boto3
from moto.server import ThreadedMotoServer

# What KFP's manifests put in mlpipeline-minio-artifact (third-party/minio, third-party/seaweedfs).
BUNDLED_KEYS = {"accesskey": "minio", "secretkey": "minio123"}


@contextlib.contextmanager
def s3_server(*buckets: str) -> Iterator[str]:
    """Start a server with ``buckets``; yields its address ``127.0.0.1:PORT``."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        address = f"{host}:{port}"
        for bucket in buckets:
            client(address).create_bucket(Bucket=bucket)
        yield address
    finally:
        server.stop()


def client(address: str):
    return boto3.client("s3", endpoint_url=f"http://{address}", region_name="us-east-1",
                        aws_access_key_id=BUNDLED_KEYS["accesskey"], aws_secret_access_key=BUNDLED_KEYS["secretkey"])


def keys(address: str, bucket: str, prefix: str = "") -> list[str]:
    pages = client(address).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]

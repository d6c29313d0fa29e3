"""A real local S3 server (moto's, from PyPI) playing KFP's bundled store and other S3 endpoints."""
import contextlib
import urllib.request
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


def reset(address: str, *buckets: str) -> None:
    """Empty the store and create ``buckets``, so that one case sees no other case's objects (only
    while no other test holds a server: it empties them all).

    moto keeps one set of backends per process, shared by every server it starts there, so a
    second server would not start empty; its ``/moto-api/reset`` endpoint (moto_api/_internal/
    urls.py) drops them all.
    """
    request = urllib.request.Request(f"http://{address}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        response.read()
    for bucket in buckets:
        client(address).create_bucket(Bucket=bucket)


def client(address: str):
    return boto3.client("s3", endpoint_url=f"http://{address}", region_name="us-east-1",
                        aws_access_key_id=BUNDLED_KEYS["accesskey"], aws_secret_access_key=BUNDLED_KEYS["secretkey"])


def keys(address: str, bucket: str, prefix: str = "") -> list[str]:
    pages = client(address).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]

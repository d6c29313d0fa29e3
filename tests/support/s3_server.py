"""A real local S3 server (moto's, from PyPI) playing KFP's bundled store and other S3 endpoints."""
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence

import boto3
from moto.server import ThreadedMotoServer

# What KFP's manifests put in mlpipeline-minio-artifact (third-party/minio, third-party/seaweedfs).
BUNDLED_KEYS = {"accesskey": "minio", "secretkey": "minio123"}
_ADMIN_KEYS: dict[str, dict[str, str]] = {}  # address -> the keys of a policed server's own admin user
_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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


def process_env(endpoint: str, home: str | None = None) -> dict[str, str]:
    """The environment of a child process that reaches the server at ``endpoint`` (a URL) as a Kubeflow step
    does: this machine's variables without its own AWS_/S3_ ones, ``s3_environment``'s, the bundled keys and
    the project on PYTHONPATH; ``home`` replaces HOME, so no ~/.aws of this machine is read."""
    from pipeline.kubeflow.storage import s3_environment

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}
    env.update(s3_environment(endpoint, environ={}), AWS_ACCESS_KEY_ID=BUNDLED_KEYS["accesskey"],
               AWS_SECRET_ACCESS_KEY=BUNDLED_KEYS["secretkey"], PYTHONPATH=_PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL="3")
    if home is not None:
        env["HOME"] = home
    return env


def client(address: str, keys: Mapping[str, str] | None = None):
    keys = keys or _ADMIN_KEYS.get(address, BUNDLED_KEYS)
    return boto3.client("s3", endpoint_url=f"http://{address}", region_name="us-east-1",
                        aws_access_key_id=keys["accesskey"], aws_secret_access_key=keys["secretkey"])


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def policed_s3_server(bucket: str, profiles: Mapping[str, Sequence[str]], batch_deletes: bool = True,
                      start_timeout_s: float = 60.0) -> Iterator[tuple[str, dict[str, dict[str, str]]]]:
    """moto's server in a process of its own with IAM enforced, as KFP 2.15+'s multi-user SeaweedFS is:
    one user per profile whose keys may touch only ``profiles[name]``'s key prefixes of ``bucket``
    (what the profile controller's policy allows: pipelines-profile-controller/sync.py:353-373@2.15.0),
    and an admin user for the test's own reads. Yields (address, {profile or "admin": keys}).

    SeaweedFS grants ``Write`` (puts and deletes), ``Read`` and ``List`` under each prefix. A batch delete
    (``POST ?delete``) SeaweedFS 4.00 (KFP 2.15, 2.16) authorizes by the bucket alone, so a profile's is denied
    (``batch_deletes`` False: moto denies it the same way, on the bucket's ARN); 4.34 (KFP 2.17) key by key,
    which moto cannot: with ``batch_deletes`` the profile may batch-delete anywhere in the bucket here. A
    listing moto matches against the bucket's ARN alone: the profile may list the whole bucket here. Every
    other request (reads, writes, copies, single deletes) is policed by key.
    """
    port = _free_port()
    address = f"127.0.0.1:{port}"
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=open(os.environ.get("MOTO_LOG", os.devnull), "w"),
                               env={**os.environ, "MOTO_ALLOW_NONEXISTENT_REGION": "true"})
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"http://{address}/moto-api/", timeout=5) as response:
                    response.read()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto's server did not start on {address} within {start_timeout_s} s "
                                       f"(exit code {process.poll()})") from None
                time.sleep(0.2)
        anyone = {"aws_access_key_id": "setup", "aws_secret_access_key": "setup", "region_name": "us-east-1",
                  "endpoint_url": f"http://{address}"}
        boto3.client("s3", **anyone).create_bucket(Bucket=bucket)
        iam = boto3.client("iam", **anyone)
        policies = {"admin": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
        for name, prefixes in profiles.items():
            bucket_actions = ["s3:ListBucket", *(["s3:DeleteObject"] if batch_deletes else [])]
            policies[name] = [
                {"Effect": "Allow", "Action": ["s3:Put*", "s3:Get*", "s3:List*", "s3:DeleteObject"],
                 "Resource": [f"arn:aws:s3:::{bucket}/{prefix}*" for prefix in prefixes]},
                # moto authorizes a listing and a batch delete (POST ?delete) on the bucket's ARN alone
                {"Effect": "Allow", "Action": bucket_actions, "Resource": f"arn:aws:s3:::{bucket}"}]
        keys = {}
        for name, statements in policies.items():
            iam.create_user(UserName=name)
            iam.put_user_policy(UserName=name, PolicyName=f"KubeflowProject{name}",
                                PolicyDocument=json.dumps({"Version": "2012-10-17", "Statement": statements}))
            created = iam.create_access_key(UserName=name)["AccessKey"]
            keys[name] = {"accesskey": created["AccessKeyId"], "secretkey": created["SecretAccessKey"]}
        request = urllib.request.Request(f"http://{address}/moto-api/reset-auth", data=b"0", method="POST",
                                         headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(request, timeout=30) as response:  # from now on every request is checked
            response.read()
        _ADMIN_KEYS[address] = keys["admin"]
        yield address, keys
    finally:
        _ADMIN_KEYS.pop(address, None)
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def keys(address: str, bucket: str, prefix: str = "") -> list[str]:
    pages = client(address).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [item["Key"] for page in pages for item in page.get("Contents", [])]

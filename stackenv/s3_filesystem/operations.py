"""What TensorFlow's ``s3://`` filesystem does, in boto3: the functions plugin.cc calls.

TensorFlow's filesystem contract (tensorflow/c/experimental/filesystem/filesystem_interface.h)
is a tree of files and directories; S3 is a flat key space. As in tensorflow-io's S3 filesystem
(what tfx-1.16 runs, so both stacks leave the same objects), a directory is a key prefix: it exists
while an object is under it, and creating one writes nothing. Writes spool
to a local file and upload on flush, sync and close (S3 has no append). Renames are copies then
deletes, one object at a time: SeaweedFS (KFP 2.16's bundled store) refuses batch deletes on
profile keys (stackenv/compat.py single_deletes_where_batch_is_denied).

The endpoint, keys and TLS come from the environment, as for tensorflow-io and Beam
(pipeline/kubeflow/storage.py s3_environment): ``AWS_ENDPOINT_URL`` (else ``S3_ENDPOINT`` with
``S3_USE_HTTPS``), ``S3_VERIFY_SSL``, ``AWS_REGION`` and boto3's own credential chain. Every call
has bounded connect and read timeouts, so a store that stops answering fails the operation with
a message instead of hanging the step.
"""
from __future__ import annotations

import os
import tempfile
import threading

# TF_Code values (tensorflow/c/tf_status.h).
NOT_FOUND, ALREADY_EXISTS, PERMISSION_DENIED, FAILED_PRECONDITION, INTERNAL, UNAVAILABLE = 5, 6, 7, 9, 13, 14
CONNECT_TIMEOUT_S, READ_TIMEOUT_S, ATTEMPTS = 10, 120, 5
READ_AHEAD = 4 << 20

_client = None
_lock = threading.Lock()


def client():
    """One boto3 client per process (boto3 clients are thread-safe), made on first use."""
    global _client
    with _lock:
        if _client is None:
            import boto3
            from botocore.config import Config

            endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("S3_ENDPOINT") or None
            if endpoint and "://" not in endpoint:
                endpoint = ("https://" if os.environ.get("S3_USE_HTTPS", "1") != "0" else "http://") + endpoint
            config = Config(connect_timeout=CONNECT_TIMEOUT_S, read_timeout=READ_TIMEOUT_S,
                            retries={"max_attempts": ATTEMPTS, "mode": "standard"},
                            s3={"addressing_style": "path" if endpoint else "auto"})
            _client = boto3.session.Session().client(
                "s3", endpoint_url=endpoint, config=config, region_name=os.environ.get("AWS_REGION") or None,
                verify=os.environ.get("S3_VERIFY_SSL", "1") != "0")
        return _client


def split(path: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ("bucket", "a/b")."""
    if not path.startswith("s3://"):
        raise ValueError(f"{path} is not an s3:// path")
    bucket, _, key = path[len("s3://"):].partition("/")
    if not bucket:
        raise ValueError(f"{path} names no bucket")
    return bucket, key.strip("/")


def status_code(error: BaseException) -> int:
    """The TF_Code for an exception plugin.cc caught."""
    if isinstance(error, FileNotFoundError):
        return NOT_FOUND
    if isinstance(error, FileExistsError):
        return ALREADY_EXISTS
    if isinstance(error, PermissionError):
        return PERMISSION_DENIED
    if isinstance(error, (NotADirectoryError, IsADirectoryError, ValueError)):
        return FAILED_PRECONDITION
    code = _error_code(error)
    if code in ("NoSuchKey", "NoSuchBucket", "404"):
        return NOT_FOUND
    if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
        return PERMISSION_DENIED
    from botocore.exceptions import BotoCoreError
    return UNAVAILABLE if isinstance(error, BotoCoreError) else INTERNAL


def _error_code(error: BaseException) -> str:
    response = getattr(error, "response", None)
    return str((response or {}).get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _head(bucket: str, key: str) -> dict | None:
    try:
        return client().head_object(Bucket=bucket, Key=key)
    except Exception as error:  # noqa: BLE001 - botocore's ClientError, by its code
        if _error_code(error) in ("404", "NoSuchKey", "NotFound"):
            return None
        raise


def _has_prefix(bucket: str, prefix: str) -> bool:
    listed = client().list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1)
    return bool(listed.get("KeyCount", len(listed.get("Contents", []))))


def _keys_under(bucket: str, prefix: str):
    for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for item in page.get("Contents", []):
            yield item["Key"]


def _is_dir(bucket: str, key: str) -> bool:
    if not key:
        client().head_bucket(Bucket=bucket)
        return True
    return _has_prefix(bucket, key + "/")


def stat(path: str) -> tuple[int, int, bool]:
    """(length, mtime in ns, is a directory); FileNotFoundError when neither object nor prefix exists."""
    bucket, key = split(path)
    if key and not path.endswith("/"):
        head = _head(bucket, key)
        if head is not None:
            return int(head["ContentLength"]), int(head["LastModified"].timestamp() * 1e9), False
    if _is_dir(bucket, key):
        return 0, 0, True
    raise FileNotFoundError(f"{path} does not exist (no object and no object under it)")


def path_exists(path: str) -> None:
    stat(path)


def is_directory(path: str) -> None:
    """Returns when ``path`` is a directory; raises NotADirectoryError for an object, else FileNotFoundError."""
    if not stat(path)[2]:
        raise NotADirectoryError(f"{path} is a file, not a directory")


def children(path: str) -> list[str]:
    """The names directly under ``path`` (objects and prefixes), without the directory's own marker."""
    bucket, key = split(path)
    prefix = f"{key}/" if key else ""
    names = []
    for page in client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix, Delimiter="/"):
        names += [common["Prefix"][len(prefix):].rstrip("/") for common in page.get("CommonPrefixes", [])]
        names += [item["Key"][len(prefix):] for item in page.get("Contents", []) if item["Key"] != prefix]
    if not names and not _is_dir(bucket, key):
        raise FileNotFoundError(f"{path} is not a directory in the store")
    return names


def create_dir(path: str) -> None:
    """Nothing to write or check: a directory is the prefix of what is written into it, and keys limited
    to a prefix (a Kubeflow profile's on SeaweedFS) may not even ask about the bucket."""
    split(path)


def delete_file(path: str) -> None:
    bucket, key = split(path)
    if _head(bucket, key) is None:
        raise FileNotFoundError(f"{path} does not exist")
    client().delete_object(Bucket=bucket, Key=key)


def delete_dir(path: str) -> None:
    bucket, key = split(path)
    if children(path):
        raise OSError(f"{path} is not empty")
    client().delete_object(Bucket=bucket, Key=key + "/")


def delete_recursively(path: str) -> None:
    bucket, key = split(path)
    keys = list(_keys_under(bucket, key + "/")) if key else list(_keys_under(bucket, ""))
    if not keys and (not key or _head(bucket, key) is None):
        raise FileNotFoundError(f"{path} does not exist")
    for each in keys or [key]:
        client().delete_object(Bucket=bucket, Key=each)


def copy(source: str, target: str) -> None:
    (source_bucket, source_key), (bucket, key) = split(source), split(target)
    if _head(source_bucket, source_key) is None:
        raise FileNotFoundError(f"{source} does not exist")
    client().copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)


def rename(source: str, target: str) -> None:
    """A file is copied then deleted; a directory, each object under it (S3 has no rename)."""
    (source_bucket, source_key), (bucket, key) = split(source), split(target)
    if _head(source_bucket, source_key) is not None:
        client().copy({"Bucket": source_bucket, "Key": source_key}, bucket, key)
        client().delete_object(Bucket=source_bucket, Key=source_key)
        return
    moved = list(_keys_under(source_bucket, source_key + "/"))
    if not moved:
        raise FileNotFoundError(f"{source} does not exist")
    for each in moved:
        client().copy({"Bucket": source_bucket, "Key": each}, bucket, key + each[len(source_key):])
    for each in moved:
        client().delete_object(Bucket=source_bucket, Key=each)


class Reader:
    """A random-access file: ranged GETs of one object, whose size is known from the start. Reads ahead
    (``READ_AHEAD`` bytes a request): TensorFlow reads records in small pieces, one request each otherwise."""

    def __init__(self, path: str):
        self.bucket, self.key = split(path)
        head = _head(self.bucket, self.key) if self.key else None
        if head is None:
            raise FileNotFoundError(f"{path} does not exist" if not self.key or not _is_dir(self.bucket, self.key)
                                    else f"{path} is a directory")
        self.size = int(head["ContentLength"])
        self.window = (0, b"")  # (offset, bytes): one attribute, so threads reading at once see a whole pair

    def read(self, offset: int, n: int) -> bytes:
        end = min(offset + n, self.size)
        if n <= 0 or offset >= end:
            return b""
        start, buffer = self.window
        if not (start <= offset and end <= start + len(buffer)):
            last = min(max(end, offset + READ_AHEAD), self.size)
            body = client().get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={offset}-{last - 1}")["Body"]
            try:
                start, buffer = offset, body.read()
            finally:
                body.close()
            self.window = (start, buffer)
        return buffer[offset - start:end - start]


class Writer:
    """A writable file: a local spool, uploaded whole when TensorFlow flushes, syncs or closes it."""

    def __init__(self, path: str, append: int = 0):
        self.bucket, self.key = split(path)
        if not self.key:
            raise IsADirectoryError(f"{path} names a bucket, not a file")
        descriptor, self.spool_path = tempfile.mkstemp(prefix="s3-upload-")
        self.spool = os.fdopen(descriptor, "w+b")
        if append and _head(self.bucket, self.key) is not None:
            client().download_fileobj(self.bucket, self.key, self.spool)
        self.dirty = True

    def write(self, data: bytes) -> None:
        self.spool.write(data)
        self.dirty = True

    def tell(self) -> int:
        return self.spool.tell()

    def flush(self) -> None:
        if self.dirty and not self.spool.closed:
            self.spool.flush()
            client().upload_file(self.spool_path, self.bucket, self.key)  # its own handle on the spool
            self.dirty = False

    def close(self) -> None:
        if not self.spool.closed:
            try:
                self.flush()
            finally:
                self.spool.close()
                os.unlink(self.spool_path)

    def __del__(self):  # a file TensorFlow dropped without closing leaves no spool behind
        if not self.spool.closed:
            self.spool.close()
            os.unlink(self.spool_path)

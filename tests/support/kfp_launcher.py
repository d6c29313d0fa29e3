"""KFP's launcher and object store as a step's pod meets them, from the backend's source.

The contract emulator (kfp_contract.py) plays the driver; this module plays the part of the
launcher that touches the object store, against a real S3 server (moto's, or any endpoint).
Every rule cites kubeflow/pipelines ``backend/src/v2/`` at tag 2.3.0 (``git show
2.3.0:backend/src/v2/<file>``); what later versions change (the bundled store's endpoint, which
keys an input download takes) comes from the pod's backend (kfp_backends.py, cited there).

- The session for the run's root (driver/driver.go RootDAG -> config/env.go
  GetStoreSessionInfo): from the ``providers`` YAML of the namespace's ``kfp-launcher``
  ConfigMap, else per scheme: ``minio://`` without providers or query -> the bundled store
  (config/env.go getDefaultMinioSessionInfo: secret ``mlpipeline-minio-artifact``, keys
  ``accesskey``/``secretkey``, endpoint objectstore/config.go by version:
  ``Backend.launcher_store_endpoint``);
  ``s3://`` without providers, or any root with a query string -> ``fromEnv``
  (config/s3.go ProvideSessionInfo).
- Opening the bucket (objectstore/object_store.go OpenBucket, createS3BucketSession,
  getS3BucketCredential): with a secret, the keys from that secret of the pod's namespace
  (missing secret or key: "Failed to get Bucket credentials ..."), path-style, the session's
  endpoint; ``fromEnv``: gocloud's ``blob.OpenBucket(s3://BUCKET?prefix=...)``, i.e. the AWS
  SDK's default chain: the keys from the container's own environment and AWS's endpoint
  unless the root's query names one (``endpoint=``); nothing from the step's ``S3_*`` or
  ``AWS_ENDPOINT_URL``.
- Inputs (component/launcher_v2.go downloadArtifacts, fetchNonDefaultBuckets): every input
  artifact whose URI the launcher maps to a local path (localPathForURI: gs:// /gcs/,
  minio:// /minio/, s3:// /s3/) is downloaded there before the command runs, every object
  under its key (objectstore/object_store.go DownloadBlob); a URI outside the run's prefix in
  the same scheme and bucket reuses the run's session, another bucket opens ``fromEnv``;
  the key is objectstore/config.go KeyFromURI ("does not have expected bucket prefix").
- Outputs (launcher_v2.go uploadOutputArtifacts, mergeRuntimeArtifacts): the ExecutorOutput
  file's ``uri`` replaces the provisioned one; its key must be under the run's bucket
  prefix (KeyFromURI, else the step fails); a local folder at its path is uploaded, none is
  a warning ("We allow components to not produce output files").
"""
from __future__ import annotations

import dataclasses
import ipaddress
import os
import posixpath
import re
from collections.abc import Mapping
from urllib.parse import parse_qs

import yaml
from boto3.exceptions import S3UploadFailedError
from botocore.exceptions import ClientError

from support.kfp_backends import NEWEST, Backend

MINIO_SECRET, MINIO_ACCESS_KEY, MINIO_SECRET_KEY = "mlpipeline-minio-artifact", "accesskey", "secretkey"
LOCAL_MOUNTS = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}  # launcher_v2.go localPathForURI
_BUCKET_PATTERN = re.compile(r"(^[a-z][a-z0-9]+:///?)([^/?]+)(/[^?]*)?(\?.+)?$")  # objectstore/config.go


class LauncherError(RuntimeError):
    """What the launcher logs before it fails the task."""


@dataclasses.dataclass
class BucketConfig:
    """objectstore/config.go Config."""

    scheme: str
    bucket: str
    prefix: str = ""
    query: str = ""

    @classmethod
    def parse(cls, path: str, artifact: bool = False) -> BucketConfig:
        """ParseBucketPathToConfig (a root) / ParseBucketConfigForArtifactURI (``artifact``: no prefix)."""
        match = _BUCKET_PATTERN.match(path)
        if not match:
            raise LauncherError(f"parse bucket config failed: unrecognized pipeline root format: {path!r}")
        scheme, bucket, prefix, query = match.groups()
        if scheme not in ("gs://", "s3://", "minio://", "mem://"):
            raise LauncherError(f"parse bucket config failed: unsupported Cloud bucket: {path!r}")
        if artifact:
            return cls(scheme, bucket)
        prefix = (prefix or "").lstrip("/")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        return cls(scheme, bucket, prefix, query or "")

    def prefixed_bucket(self) -> str:
        return self.scheme + posixpath.normpath(posixpath.join(self.bucket, self.prefix))

    def key_from_uri(self, uri: str) -> str:
        prefixed = self.prefixed_bucket()
        if not uri.startswith(prefixed):
            raise LauncherError(f"URI {uri!r} does not have expected bucket prefix {prefixed!r}")
        key = uri[len(prefixed):].lstrip("/")
        if not key:
            raise LauncherError(f"URI {uri!r} has empty key given prefixed bucket {prefixed!r}")
        return key


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def local_path_for_uri(uri: str) -> str | None:
    for scheme, mount in LOCAL_MOUNTS.items():
        if uri.startswith(scheme):
            return mount + uri[len(scheme):]
    return None


def store_session_info(root: str, launcher_config: Mapping[str, str] | None) -> dict:
    """config/env.go GetStoreSessionInfo with config/minio.go and config/s3.go."""
    config = BucketConfig.parse(root)
    provider = config.scheme[:-3]
    providers = yaml.safe_load((launcher_config or {}).get("providers") or "") or {}
    if not isinstance(providers, dict):
        raise LauncherError("failed to unmarshall kfp bucket providers, ensure that providers config is well formed")
    if provider == "gs":
        return {"Provider": "gs", "Params": {"fromEnv": "true"}}
    if provider not in ("minio", "s3"):
        raise LauncherError(f"Encountered unsupported provider in provider config {provider}")
    entry = providers.get(provider) or {}
    default, overrides = entry.get("default"), entry.get("Overrides")
    if provider == "minio" and default is None and overrides is None and not config.query:
        return {"Provider": "minio", "Params": {
            "region": "minio", "endpoint": "<MinioDefaultEndpoint>", "disableSSL": "true", "fromEnv": "false",
            "secretName": MINIO_SECRET, "accessKeyKey": MINIO_ACCESS_KEY, "secretKeyKey": MINIO_SECRET_KEY}}
    if (default is None and overrides is None) or config.query:
        return {"Provider": provider, "Params": {"fromEnv": "true"}}
    if default is None or default.get("credentials") is None:
        raise LauncherError("invalid provider config: missing default credentials")
    params = {"endpoint": default.get("endpoint", ""), "region": default.get("region", ""),
              "disableSSL": str(bool(default.get("disableSSL", False))).lower()}
    chosen = default
    for override in overrides or []:
        if override.get("bucketName") == config.bucket and config.prefix.startswith(override.get("keyPrefix", "")):
            for key in ("endpoint", "region"):
                if override.get(key):
                    params[key] = override[key]
            if override.get("disableSSL") is not None:
                params["disableSSL"] = str(bool(override["disableSSL"])).lower()
            if override.get("credentials") is None:
                raise LauncherError("invalid provider config: missing override credentials")
            chosen = override
            break
    credentials = chosen["credentials"]
    params["fromEnv"] = str(bool(credentials.get("fromEnv", False))).lower()
    if not credentials.get("fromEnv"):
        secret = credentials.get("secretRef")
        if secret is None:
            raise LauncherError("invalid provider config: missing override secretref")
        params.update(secretName=secret.get("secretName", ""), accessKeyKey=secret.get("accessKeyKey", ""),
                      secretKeyKey=secret.get("secretKeyKey", ""))
    return {"Provider": provider, "Params": params}


@dataclasses.dataclass
class Pod:
    """What the launcher sees of its pod: namespace, environment, the namespace's secrets, the cluster's DNS."""

    namespace: str
    env: Mapping[str, str]
    secrets: Mapping[str, Mapping[str, str]]
    dns: Mapping[str, str]  # "service.namespace:port" -> "host:port" this machine reaches
    backend: Backend = NEWEST


class Bucket:
    """An opened bucket (blob.PrefixedBucket over an S3 session), or the error its first use raises."""

    def __init__(self, config: BucketConfig, session: dict, pod: Pod):
        self.config, self.error, self.client = config, None, None
        self.under_key_only = pod.backend.download_under_key_only
        params = session.get("Params", {})
        try:
            if params.get("fromEnv", "false") == "true":
                self._open_from_env(pod)
            else:
                self._open_with_secret(params, pod)
        except LauncherError as error:
            if "Failed to get Bucket credentials" in str(error):
                raise LauncherError(f"Failed to open bucket {config.bucket!r}: {error}") from None
            self.error = error  # gocloud opens lazily: the first request fails

    def _open_with_secret(self, params: Mapping[str, str], pod: Pod) -> None:
        name = params["secretName"]
        where = f"Failed to get Bucket credentials from secret name={name!r} namespace={pod.namespace!r}"
        if name not in pod.secrets:
            raise LauncherError(f"{where}: secrets {name!r} not found")
        access, secret = pod.secrets[name].get(params["accessKeyKey"]), pod.secrets[name].get(params["secretKeyKey"])
        if not access or not secret:
            raise LauncherError(f"{where}: could not find specified keys {params['secretKeyKey']!r} or "
                                f"{params['accessKeyKey']!r}")
        endpoint = params.get("endpoint", "")
        if endpoint == "<MinioDefaultEndpoint>":  # objectstore/config.go, by version (kfp_backends.py)
            endpoint = pod.backend.launcher_store_endpoint(dict(pod.env))
        self._connect(endpoint, params.get("disableSSL") == "true", access, secret, pod)

    def _open_from_env(self, pod: Pod) -> None:
        """gocloud s3blob URL opener: the AWS SDK's default chain, the endpoint only from the query."""
        access, secret = pod.env.get("AWS_ACCESS_KEY_ID"), pod.env.get("AWS_SECRET_ACCESS_KEY")
        if not access or not secret:
            raise LauncherError("NoCredentialProviders: no valid providers in chain (the launcher's "
                                "container has no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY and no instance role)")
        query = parse_qs(self.config.query.lstrip("?"))
        endpoint = (query.get("endpoint") or ["s3.amazonaws.com"])[0]
        self._connect(endpoint, (query.get("disableSSL") or ["false"])[0] == "true", access, secret, pod)

    def _connect(self, endpoint: str, disable_ssl: bool, access: str, secret: str, pod: Pod) -> None:
        import boto3
        from botocore.config import Config

        address = endpoint.split("://", 1)[-1]
        target = pod.dns.get(address) or (address if _is_ip(address.rsplit(":", 1)[0]) else None)
        if target is None:
            raise LauncherError(f"RequestError: send request failed caused by: dial tcp: lookup "
                                f"{address.split(':')[0]}: no such host")
        if not target:  # the Service exists, this port of it does not
            raise LauncherError(f"RequestError: send request failed caused by: dial tcp {address}: connect: "
                                "connection refused")
        scheme = "http" if disable_ssl or endpoint.startswith("http://") else "https"
        self.client = boto3.client("s3", endpoint_url=f"{scheme}://{target}", region_name="us-east-1",
                                   aws_access_key_id=access, aws_secret_access_key=secret,
                                   config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))

    def _key(self, key: str) -> str:
        return self.config.prefix + key

    def download(self, local_dir: str, blob_dir: str) -> int:
        """objectstore/object_store.go DownloadBlob; returns the bytes written to the pod's disk."""
        if self.error:
            raise self.error
        written = 0
        # up to 2.16 every key that starts with the artifact's (``model`` takes ``model_run`` too), from 2.17 the
        # keys under it (objectstore/object_store.go DownloadBlob :123-148@2.3.0, :146-205@2.17.0)
        prefix = self._key(blob_dir) + ("/" if self.under_key_only else "")
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                relative = os.path.relpath(item["Key"], prefix)
                target = os.path.join(local_dir, relative)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                self.client.download_file(self.config.bucket, item["Key"], target)
                written += item["Size"]
        return written

    def upload(self, local_path: str, blob_path: str) -> None:
        """objectstore/object_store.go UploadBlob (FileNotFoundError: no local output)."""
        os.stat(local_path)  # os.Stat first: no local output touches no bucket
        if self.error:
            raise self.error
        if not os.path.isdir(local_path):
            self.client.upload_file(local_path, self.config.bucket, self._key(blob_path))
            return
        for name in sorted(os.listdir(local_path)):
            self.upload(os.path.join(local_path, name), f"{blob_path}/{name}")


def download_inputs(executor_input: dict, run_root: str, session: dict, pod: Pod, mount: str) -> int:
    """launcher_v2.go downloadArtifacts; returns the bytes put on the pod's disk (under ``mount``)."""
    default_config = BucketConfig.parse(run_root)
    default_bucket = Bucket(default_config, session, pod)
    written = 0
    for name, artifacts in executor_input["inputs"].get("artifacts", {}).items():
        if not artifacts["artifacts"]:
            continue
        uri = artifacts["artifacts"][0]["uri"]
        local = local_path_for_uri(uri)
        if local is None:
            continue  # "does not have a recognized storage URI ... Skipping downloading"
        bucket, config = default_bucket, default_config
        if not uri.startswith(default_config.prefixed_bucket()):  # fetchNonDefaultBuckets
            config = BucketConfig.parse(uri, artifact=True)
            same = config.scheme == default_config.scheme and config.bucket == default_config.bucket
            bucket = Bucket(config, session if same else {"Provider": config.scheme[:-3],
                                                          "Params": {"fromEnv": "true"}}, pod)
        try:
            written += bucket.download(mount + local, config.key_from_uri(uri))
        except (LauncherError, ClientError) as error:
            raise LauncherError(f"failed to download input artifact {name!r} from remote storage URI "
                                f"{uri!r}: {error}") from None
    return written


def upload_outputs(executor_input: dict, reported: Mapping[str, dict], run_root: str, session: dict, pod: Pod,
                   mount: str) -> dict[str, dict]:
    """launcher_v2.go uploadOutputArtifacts: the merged output artifacts, each uploaded if it has a local folder."""
    config = BucketConfig.parse(run_root)
    bucket = Bucket(config, session, pod)
    merged = {}
    for name, artifacts in executor_input["outputs"].get("artifacts", {}).items():
        if not artifacts["artifacts"]:
            continue
        artifact = dict(artifacts["artifacts"][0])
        source = (reported.get(name) or {}).get("artifacts") or []
        if source:  # mergeRuntimeArtifacts
            artifact["uri"] = source[0].get("uri") or artifact["uri"]
            if source[0].get("metadata") is not None:
                artifact["metadata"] = {**(artifact.get("metadata") or {}), **source[0]["metadata"]}
        local = local_path_for_uri(artifact["uri"])
        if local is not None:
            try:
                key = config.key_from_uri(artifact["uri"])
            except LauncherError as error:
                raise LauncherError(f"failed to upload output artifact {name!r}: {error}") from None
            try:
                bucket.upload(mount + local, key)
            except FileNotFoundError:
                pass  # "Local filepath ... does not exist": components may produce no output files
            except (ClientError, S3UploadFailedError) as error:  # the store refused: AccessDenied, ...
                raise LauncherError(f"failed to upload output artifact {name!r} to {artifact['uri']!r}: "
                                    f"{error}") from None
        merged[name] = artifact
    return merged


def directory_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for folder, _, names in os.walk(path) for name in names)

"""The ``kfp-launcher`` ConfigMap that lets KFP's launcher open an ``s3://`` root on another endpoint.

KFP's launcher opens an ``s3://`` root with the ``providers`` entry of the ConfigMap
``kfp-launcher`` in the run's namespace (kubeflow/pipelines 2.2+ backend
``src/v2/config/env.go`` getBucketProviders, ``config/s3.go`` S3ProviderConfig: endpoint,
region, disableSSL, credentials from a secret); without it, it uses the AWS SDK's default
chain against AWS (2.3-2.14 take no endpoint from the environment), so the first step with
an input fails on MinIO elsewhere, Ceph or R2. The steps' own TensorFlow and Beam get the
same endpoint and keys from the package (``compile --s3-endpoint --s3-secret``). Writing
the ConfigMap is a cluster change, so ``compile`` writes the manifest next to the package
and the README says who applies it; on multi-user Kubeflow 2.15+ the profile controller owns
each profile's ``kfp-launcher``, so the entry goes into its template instead.
"""
import os

import yaml

from pipeline.kubeflow.platform import S3_SECRET_KEYS

NAME = "kfp-launcher"
#: What decides how the launcher opens an s3:// root (config/s3.go ProvideSessionInfo's params, less the
#: retries and path style, which do not decide whether the bucket opens).
SESSION_FIELDS = ("endpoint", "region", "disableSSL", "fromEnv", "secretName", "accessKeyKey", "secretKeyKey")


def launcher_configmap(root: str, endpoint: str, secret: str, region: str = "us-east-1",
                       namespace: str = "kubeflow") -> dict:
    """The ConfigMap (config/s3.go field names) for ``root``'s bucket on ``endpoint``."""
    access_key, secret_key = list(S3_SECRET_KEYS)
    providers = {"s3": {"default": {
        "endpoint": endpoint, "region": region, "disableSSL": endpoint.startswith("http://"),
        "credentials": {"fromEnv": False, "secretRef": {
            "secretName": secret, "accessKeyKey": access_key, "secretKeyKey": secret_key}}}}}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kfp-launcher", "namespace": namespace},
            "data": {"defaultPipelineRoot": root, "providers": yaml.safe_dump(providers, sort_keys=False)}}


def launcher_configmap_path(package_path: str) -> str:
    """``<package>.kfp-launcher.yaml``: where ``compile`` writes the manifest and ``deploy`` reads it back."""
    return os.path.splitext(package_path)[0] + ".kfp-launcher.yaml"


def write_launcher_configmap(package_path: str, root: str, endpoint: str, secret: str) -> str:
    """``<package>.kfp-launcher.yaml`` beside the package; returns its path."""
    path = launcher_configmap_path(package_path)
    with open(path, "w") as handle:
        handle.write("# KFP's launcher reads this to open the s3:// pipeline root (kubeflow/README.md, 'An s3:// root\n"
                     "# on another endpoint'). Set the namespace to the runs' namespace, then: kubectl apply -f "
                     f"{os.path.basename(path)}\n")
        yaml.safe_dump(launcher_configmap(root, endpoint, secret), handle, sort_keys=False)
    return path


def s3_session(providers_text: str | None, root: str) -> dict[str, str] | None:
    """How KFP's launcher opens the ``s3://`` ``root`` with this ``providers`` YAML: the session's
    :data:`SESSION_FIELDS`, or None when it falls back to the AWS SDK's default chain against AWS
    (config/s3.go ProvideSessionInfo: no default and no override; the first override whose bucket
    and key prefix match the root's overrides the default). Field names as sigs.k8s.io/yaml reads
    them (encoding/json: case-insensitive, so ``overrides`` and ``Overrides`` both count).
    Raises ValueError for a providers text the launcher cannot read."""
    providers = yaml.safe_load(providers_text or "") or {}
    if not isinstance(providers, dict):
        raise ValueError("the providers entry is not a YAML mapping")
    entry = _folded(providers).get("s3") or {}
    bucket, _, prefix = root[len("s3://"):].partition("/")
    default, overrides = entry.get("default"), entry.get("overrides")
    if default is None and overrides is None:
        return None
    if not isinstance(default, dict) or not isinstance(default.get("credentials"), dict):
        raise ValueError("it has no s3 default with credentials (\"missing default credentials\")")
    chosen = default
    session = {"endpoint": str(default.get("endpoint") or ""), "region": str(default.get("region") or ""),
               "disableSSL": str(bool(default.get("disablessl"))).lower()}
    for override in overrides or []:
        if override.get("bucketname") == bucket and prefix.startswith(override.get("keyprefix") or ""):
            session.update({key: str(override[key]) for key in ("endpoint", "region") if override.get(key)})
            if override.get("disablessl") is not None:
                session["disableSSL"] = str(bool(override["disablessl"])).lower()
            chosen = override
            break
    credentials = chosen.get("credentials") or {}
    session["fromEnv"] = str(bool(credentials.get("fromenv"))).lower()
    if not credentials.get("fromenv"):
        secret = credentials.get("secretref") or {}
        session.update(secretName=str(secret.get("secretname") or ""),
                       accessKeyKey=str(secret.get("accesskeykey") or ""),
                       secretKeyKey=str(secret.get("secretkeykey") or ""))
    return session


def _folded(value):
    """Mapping keys in lower case, as encoding/json matches struct fields."""
    if isinstance(value, dict):
        return {str(key).lower(): _folded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_folded(item) for item in value]
    return value

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


def write_launcher_configmap(package_path: str, root: str, endpoint: str, secret: str) -> str:
    """``<package>.kfp-launcher.yaml`` beside the package; returns its path."""
    path = os.path.splitext(package_path)[0] + ".kfp-launcher.yaml"
    with open(path, "w") as handle:
        handle.write("# KFP's launcher reads this to open the s3:// pipeline root (kubeflow/README.md, 'An s3:// root\n"
                     "# on another endpoint'). Set the namespace to the runs' namespace, then: kubectl apply -f "
                     f"{os.path.basename(path)}\n")
        yaml.safe_dump(launcher_configmap(root, endpoint, secret), handle, sort_keys=False)
    return path

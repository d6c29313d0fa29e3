"""Which pipeline roots a KFP 2.x run of this image can use, checked before anything is uploaded.

Two facts decide it. KFP's launcher gives every output artifact the URI
``<root>/<pipeline>/<run id>/<task>/<output>`` and refuses a root that is not ``gs://``,
``s3://`` or ``minio://`` (kubeflow/pipelines 2.3.0 backend
``src/v2/component/launcher_v2.go`` localPathForURI, called by prepareOutputFolders for
every output): a local path fails every step. And TFX writes artifacts itself through
``tf.io.gfile`` and Beam, which know ``gs://`` (and ``s3://`` with tensorflow-io or
stackenv/s3_filesystem, and ``apache-beam[aws]``) but no ``minio://``, KFP's default root
(``minio://mlpipeline/v2/artifacts``, backend ``src/v2/config/env.go``): a ``minio://`` root
is KFP's bundled store, which the steps read as ``s3://`` (pipeline/kubeflow/bundled_store.py).

An ``s3://`` root needs the endpoint twice: the steps get it from ``--s3-endpoint`` (compiled
into their env), the launcher from the ``providers`` entry of the namespace's
``kfp-launcher`` ConfigMap (backend ``src/v2/config/s3.go``; pipeline/kubeflow/launcher_config.py
writes it), since it reads none of the step's own variables for an endpoint before 2.15.
"""
import os
from collections.abc import Mapping

from stackenv.errors import ProjectError

from pipeline.kubeflow.bucket_names import bucket_problem


class KubeflowConfigError(ProjectError, ValueError):
    """A compile or deploy setting a KFP cluster would reject or could not run; the message is
    the paragraph the user reads."""


DEFAULT_KFP_ROOT = "minio://mlpipeline/v2/artifacts"  # backend src/v2/config/env.go defaultPipelineRoot
# Scheme -> what the image needs for it; the only roots a step can both get and write.
WRITABLE_SCHEMES: dict[str, str] = {
    "gs": "Google Cloud Storage (credentials: the pod's service account / Workload Identity)",
    "s3": "S3 or an S3-compatible store such as MinIO elsewhere, Ceph or R2 (endpoint and keys: "
          "`compile --s3-endpoint URL --s3-secret NAME`, and the launcher's providers config)",
    "minio": "KFP's bundled object store (MinIO, SeaweedFS from KFP 2.16), e.g. minio://mlpipeline/tfx: "
             "nothing to configure, the steps use the install's secret mlpipeline-minio-artifact",
}


def scheme_of(uri: str) -> str:
    return uri.split("://", 1)[0].lower() if "://" in uri else ""


def check_pipeline_root(root: str, where: str) -> None:
    """Raise a paragraph unless a KFP step can write artifacts under ``root``."""
    scheme = scheme_of(root)
    bucket = bucket_problem(root)
    if scheme in WRITABLE_SCHEMES and not bucket:
        return
    supported = ", ".join(f"{s}:// ({what})" for s, what in WRITABLE_SCHEMES.items())
    if not scheme or scheme == "file":
        reason = (f"{root} is a local path. KFP's launcher gives every step's outputs URIs under the "
                  "pipeline root and fails any step whose root is not gs://, s3:// or minio:// "
                  "('failed to generate local storage path'), so a pod can never write there.")
    elif scheme in WRITABLE_SCHEMES:
        reason = f"{bucket}, so every step would fail to write there (and models would be pushed to it)."
    else:
        reason = f"{root} uses {scheme}://, which neither KFP's launcher nor this image can write."
    raise KubeflowConfigError(
        f"{where}: the pipeline root must be object storage the pipeline image can write. {reason} "
        f"Supported: {supported}. Pass e.g. --pipeline-root gs://my-bucket/tfx, or --pipeline-root "
        "minio://mlpipeline/tfx for KFP's own store.")


#: Where a path inside the pipeline image may point (kubeflow/Dockerfile bakes data sets there).
IMAGE_PATH_PREFIX = "/opt/tfx-data/"


def check_cluster_input(path: str | None, flag: str, where: str) -> None:
    """Raise a paragraph when ``path`` (``--data``, ``--score``) is a path on this machine: the steps run in pods,
    which see object storage and the image's own files, so such a path compiles but fails in the pod (a
    ``--score`` folder only after training). A path under the image's data root is the image's own."""
    problem = bucket_problem(path) if path else ""
    if problem:
        raise KubeflowConfigError(f"{where}: {flag} {problem}, so the step that reads it would fail in its "
                                  f"pod. Pass the URI of the uploaded folder, e.g. {flag} gs://my-bucket/data.")
    if not path or "://" in path or path.startswith(IMAGE_PATH_PREFIX):
        return
    here = " (it exists on this machine)" if os.path.exists(os.path.expanduser(path)) else ""
    name = os.path.basename(path.rstrip("/")) or "data"
    raise KubeflowConfigError(
        f"{where}: {flag} {path} is a local path{here}, but on Kubeflow every step runs in a pod that sees object "
        "storage and the pipeline image's files, not this machine's disk, so the run would fail in the pod that "
        f"reads it. Upload the folder (e.g. `gsutil cp -r {path} gs://my-bucket/{name}` or `aws s3 cp --recursive`)"
        f" and pass that gs://, s3:// or minio:// URI as {flag}; a folder baked into "
        f"the image is accepted under {IMAGE_PATH_PREFIX}.")


def check_s3_root(root: str, s3_endpoint: str | None, where: str) -> None:
    """An ``s3://`` root needs an endpoint for the steps (AWS included: the region's endpoint)."""
    if scheme_of(root) != "s3" or s3_endpoint:
        return
    bucket = root.split("://", 1)[1].split("/")[0]
    raise KubeflowConfigError(
        f"{where}: {root} is an s3:// root but no --s3-endpoint was given, so the steps' TensorFlow and "
        "Beam would not know which store to talk to. Pass the store's URL: --s3-endpoint "
        "http://HOST:9000 for MinIO elsewhere or Ceph RGW, https://ACCOUNT.r2.cloudflarestorage.com "
        "for R2, https://s3.REGION.amazonaws.com for AWS; with --s3-secret NAME for a Kubernetes "
        "secret holding its keys as accesskey/secretkey. KFP's launcher needs the same endpoint in the "
        "providers entry of the namespace's kfp-launcher ConfigMap (compile writes it next to the "
        f"package; kubeflow/README.md, 'An s3:// root on another endpoint'). For KFP's own store use "
        f"--pipeline-root minio://{bucket}/... instead: it needs neither.")


def register_filesystems(text: str) -> None:
    """Give ``tf.io.gfile`` an s3:// filesystem when ``text`` names an s3:// URI.

    TensorFlow has no s3:// filesystem of its own. On tfx-1.16, tensorflow-io registers one on
    import; for tfx-1.21's TensorFlow there is no tensorflow-io, and the project's own plugin
    (stackenv/s3_filesystem) does the same through TensorFlow's filesystem C API. Beam's
    (``apache-beam[aws]``) needs neither. All read the endpoint and keys from the environment
    (``s3_environment``). A plugin that cannot be built is one paragraph, not a traceback.
    """
    if "s3://" not in text:
        return
    try:
        import tensorflow_io  # noqa: F401 - registers s3:// with tf.io.gfile
        return
    except ImportError:
        pass
    from stackenv import s3_filesystem
    try:
        s3_filesystem.register()
    except ProjectError as error:
        raise ProjectError(f"An s3:// location ({_first_s3_uri(text)}) needs TensorFlow's s3:// filesystem. "
                           f"{error.paragraph}") from None


def _first_s3_uri(text: str) -> str:
    start = text.index("s3://")
    end = start
    while end < len(text) and text[end] not in "\"' ,;\n":
        end += 1
    return text[start:end]


def s3_environment(endpoint: str, region: str = "us-east-1",
                   environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables that point TensorFlow's s3:// filesystem, boto3 (Beam) and TFX at an S3 endpoint.

    Keys come separately (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, from a Kubernetes secret
    on a cluster). ``endpoint`` is a URL: http:// for MinIO inside the cluster.
    """
    if "://" not in endpoint:
        raise KubeflowConfigError(f"--s3-endpoint {endpoint!r} is not a URL: write http://{endpoint} (no TLS, "
                                  f"e.g. MinIO inside the cluster) or https://{endpoint}.")
    secure = endpoint.startswith("https://")
    return {
        "AWS_ENDPOINT_URL": endpoint,             # boto3 >= 1.28.57, used by Beam's S3 filesystem
        "S3_ENDPOINT": endpoint,                  # tensorflow-io (tfx-1.16)
        "S3_USE_HTTPS": "1" if secure else "0",
        "S3_VERIFY_SSL": "1" if secure else "0",
        "AWS_REGION": (environ or os.environ).get("AWS_REGION", region),
    }

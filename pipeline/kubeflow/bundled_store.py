"""KFP's own object store (``minio://``) as TensorFlow and Beam can use it, with no cluster change.

Decided from the backend's source (kubeflow/pipelines ``backend/src/v2/``, 2.3.0 to 2.17.0):

- The launcher opens a ``minio://BUCKET/...`` root with no configuration at all: without a
  ``providers`` entry in the ``kfp-launcher`` ConfigMap it uses the bundled store's session
  (``config/minio.go`` ProvideSessionInfo -> ``config/env.go`` getDefaultMinioSessionInfo:
  the secret ``mlpipeline-minio-artifact`` of the pod's namespace, keys ``accesskey`` /
  ``secretkey``, path-style, no TLS; endpoint ``minio-service`` up to 2.15,
  ``seaweedfs.kubeflow:9000`` from 2.16, ``objectstore/config.go``). An ``s3://`` root on
  the same store needs a ``providers`` entry, i.e. a cluster change, and from 2.15 the
  profile controller owns each profile's ``kfp-launcher``. So the package keeps KFP's
  ``minio://`` root.
- No TensorFlow or Beam filesystem reads ``minio://``, and the store speaks S3: inside the
  step, every ``minio://B/K`` URI of the ExecutorInput becomes ``s3://B/K`` on the bundled
  endpoint (same bucket, same keys), with the keys from the same secret as env (the
  platform spec, pipeline/kubeflow/platform.py). TFX reads and writes the objects directly.
- The original URIs go back in the ExecutorOutput file: the launcher takes an artifact's
  ``uri`` from that file (``component/launcher_v2.go`` mergeRuntimeArtifacts) and then
  needs it under the run's bucket (``objectstore/config.go`` KeyFromURI: "does not have
  expected bucket prefix" fails the step); downstream steps get it back as ``minio://``.
- The launcher still downloads every input artifact to the pod's disk before the command
  starts (``launcher_v2.go`` downloadArtifacts; no flag skips it) and uploads a local output
  folder only if one exists ("We allow components to not produce output files"). Working
  on those copies instead would put every output on the pod's disk too, and TFJob pods and
  remote Beam workers have no copies; so the steps ignore them, and the pods need
  ephemeral storage for the inputs (kubeflow/README.md gives the figures).
"""
from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, MutableMapping

from pipeline.kubeflow.storage import KubeflowConfigError, register_filesystems, s3_environment

SCHEME, S3_SCHEME = "minio://", "s3://"
# Set by `compile` in every step's env on the bundled store: also steps with no minio:// URI in their
# arguments (the input-resolution step, a TFJob's pods) need the endpoint for the s3:// data and serving paths.
MARKER, MARKER_VALUE = "PIPELINE_OBJECT_STORE", "kfp-bundled"
SECRET = "mlpipeline-minio-artifact"  # config/env.go minioArtifactSecretName
# The store's S3 port, newest install first: (the Service's DNS name and port in the kubeflow namespace,
# the env Kubernetes sets for it in pods of that namespace (host, port), the KFP versions whose launcher
# uses it, where). Kubernetes sets <SERVICE>_SERVICE_PORT_<PORT NAME> for each named port.
SERVICES = (
    # 2.16+: only the seaweedfs Service, S3 on its port 9000 (named http-s3-compat); the launcher's default
    # endpoint (objectstore/config.go:29@2.16.0; third-party/seaweedfs/base/seaweedfs/seaweedfs-service.yaml@2.16.0).
    ("seaweedfs.kubeflow:9000", "SEAWEEDFS_SERVICE_HOST", "SEAWEEDFS_SERVICE_PORT_HTTP_S3_COMPAT", "2.16+"),
    # up to 2.15: minio-service:9000, in 2.15 an alias of SeaweedFS's 8333 (the seaweedfs Service has no 9000
    # there: third-party/seaweedfs/base/seaweedfs/{minio-service,seaweedfs-service}.yaml@2.15.0), which the 2.15
    # launcher always uses (objectstore/config.go:29@2.15.0) and 2.3-2.14 outside the kubeflow namespace
    # (objectstore/config.go MinioDefaultEndpoint :164-178@2.3.0).
    ("minio-service.kubeflow:9000", "MINIO_SERVICE_SERVICE_HOST", "MINIO_SERVICE_SERVICE_PORT", "2.0-2.15"),
)
#: How long one candidate Service may take to accept a connection (a ClusterIP port that the Service
#: does not define may drop packets rather than refuse them).
CONNECT_TIMEOUT_S = 3.0


def readable_uri(uri: str) -> str:
    """``minio://B/K`` as TensorFlow and Beam read it (``s3://B/K`` on the bundled endpoint)."""
    return S3_SCHEME + uri[len(SCHEME):] if uri.startswith(SCHEME) else uri


def uses_bundled_store(text: str, environ: Mapping[str, str] | None = None) -> bool:
    return SCHEME in text or (os.environ if environ is None else environ).get(MARKER) == MARKER_VALUE


def connect(address: str, timeout: float = CONNECT_TIMEOUT_S) -> str:
    """``host:port`` as the address that accepted a TCP connection (``ip:port``); OSError if none did.

    The resolved address, not the name, goes to TensorFlow: a Service's ClusterIP is as stable as
    the Service, and it is the address the probe proved reachable.
    """
    host, port = address.rsplit(":", 1)
    failure: OSError = OSError(f"{address}: no address")
    for family, kind, proto, _, sockaddr in socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM):
        try:
            with socket.socket(family, kind, proto) as probe:
                probe.settimeout(timeout)
                probe.connect(sockaddr)
        except OSError as error:
            failure = error
            continue
        ip, reached_port = str(sockaddr[0]), int(sockaddr[1])
        return f"[{ip}]:{reached_port}" if ":" in ip else f"{ip}:{reached_port}"
    raise failure


def endpoint(environ: Mapping[str, str] | None = None, reach: Callable[[str], str] = connect) -> str:
    """The bundled store's S3 endpoint URL, as the launcher of this cluster's KFP reaches it.

    In the ``kubeflow`` namespace (standalone KFP) Kubernetes sets each Service's host and port in
    the pod's environment; in a profile namespace (multi-user) it sets none, since it does so only
    for Services of the pod's own namespace, and the step tries each Service's port in turn: on
    2.16+ SeaweedFS's 9000 answers (also where an old ``minio-service`` was left behind), on 2.15
    the ``seaweedfs`` Service has no 9000 and the ``minio-service`` alias answers, before 2.15
    there is no ``seaweedfs`` at all. Each try is bounded (``CONNECT_TIMEOUT_S``).
    """
    environ = os.environ if environ is None else environ
    for _, host_var, port_var, _ in SERVICES:
        if environ.get(host_var) and environ.get(port_var):
            return f"http://{environ[host_var]}:{environ[port_var]}"
    tried = []
    for address, _, _, versions in SERVICES:
        try:
            return f"http://{reach(address)}"
        except OSError as error:
            tried.append(f"{address} (KFP {versions}): {error}")
    raise KubeflowConfigError(
        "This step's artifacts are on KFP's bundled object store (minio://), but the pod reaches none of its "
        f"Services: {'; '.join(tried)}. If the store runs elsewhere, compile with --s3-endpoint http://HOST:PORT "
        f"(and --s3-secret if its keys are not in {SECRET}); otherwise check that the KFP install's object "
        "store is running (`kubectl -n kubeflow get svc,pods`) and that no NetworkPolicy blocks this namespace "
        "(KFP 2.15's SeaweedFS policy admits only some namespaces; fixed in 2.16).")


def configure_environment(environ: MutableMapping[str, str] | None = None, **kwargs) -> str:
    """Point tensorflow-io and boto3 at the bundled store unless the step was compiled with an endpoint."""
    env: MutableMapping[str, str] = os.environ if environ is None else environ
    url = env.get("S3_ENDPOINT") or endpoint(env, **kwargs)
    for key, value in s3_environment(url, environ=env).items():
        env.setdefault(key, value)
    missing = [name for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY") if not env.get(name)]
    if missing:
        raise KubeflowConfigError(
            f"This step's artifacts are on KFP's bundled object store (minio://) at {url}, but "
            f"{' and '.join(missing)} is not set: the package sets them from the secret {SECRET} "
            "(keys accesskey, secretkey) of the run's namespace. Recompile with `python -m pipeline "
            "compile --pipeline-root minio://...` (it adds the secret), and check that the secret exists "
            "in that namespace (`kubectl get secret mlpipeline-minio-artifact -n NAMESPACE`).")
    return url


#: Bounds of the start-up check of the store (one listing): never a step that hangs on an unreachable store.
CHECK_TIMEOUT_S = 10.0


def check_access(url: str, executor_input: dict, environ: Mapping[str, str] | None = None) -> None:
    """One bounded listing under the step's first output, before any work: an unreachable store, keys it
    refuses, or a prefix they may not touch (multi-user KFP 2.15+: pipeline/kubeflow/profile_store.py)
    is one paragraph at the step's start instead of a failure after an hour of training."""
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

    env = os.environ if environ is None else environ
    uris = [artifact.get("uri", "") for artifacts in executor_input.get("outputs", {}).get("artifacts", {}).values()
            for artifact in artifacts.get("artifacts", [])]
    uri = next((readable_uri(u) for u in uris if readable_uri(u).startswith(S3_SCHEME)), None)
    if uri is None:
        return
    bucket, _, key = uri[len(S3_SCHEME):].partition("/")
    client = boto3.client("s3", endpoint_url=url, region_name=env.get("AWS_REGION", "us-east-1"),
                          aws_access_key_id=env.get("AWS_ACCESS_KEY_ID"),
                          aws_secret_access_key=env.get("AWS_SECRET_ACCESS_KEY"),
                          config=Config(connect_timeout=CHECK_TIMEOUT_S, read_timeout=CHECK_TIMEOUT_S,
                                        retries={"max_attempts": 1}, s3={"addressing_style": "path"}))
    try:
        client.list_objects_v2(Bucket=bucket, Prefix=key.rstrip("/") + "/", MaxKeys=1)
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        if code in ("InvalidAccessKeyId", "SignatureDoesNotMatch"):
            why = (f"refuses the keys the step has ({code}): they come from the secret {SECRET} of the run's "
                   "namespace (`kubectl get secret mlpipeline-minio-artifact -n NAMESPACE -o yaml`); check that "
                   "they are the store's current ones")
        elif code in ("AccessDenied", "403"):
            why = (f"denies these keys {S3_SCHEME}{bucket}/{key} ({code}); on multi-user KFP 2.15+ a profile's keys "
                   f"reach only mlpipeline/private-artifacts/<namespace>/, private/<namespace>/, shared/ and "
                   "artifacts/: compile with --pipeline-root minio://mlpipeline/private-artifacts/<namespace>/tfx")
        elif code in ("NoSuchBucket", "404"):
            why = f"has no bucket {bucket!r}: create it, or compile with a root in an existing bucket"
        else:
            why = f"answered {code or error} to a listing of {S3_SCHEME}{bucket}/{key}"
        raise KubeflowConfigError(f"This step's object store at {url} {why}.") from None
    except BotoCoreError as error:
        raise KubeflowConfigError(
            f"This step's object store at {url} did not answer within {CHECK_TIMEOUT_S:.0f} s ({error}). Check that "
            "it runs (`kubectl -n kubeflow get svc,pods`) and that no NetworkPolicy blocks this namespace (KFP "
            "2.15's SeaweedFS policy admits only profile namespaces and istio-system; 2.16 fixed it), or compile "
            "with --s3-endpoint http://HOST:PORT where the store runs elsewhere.") from None


def prepare_pod_storage(text: str, environ: MutableMapping[str, str] | None = None) -> None:
    """What a pod that is not a KFP step (a TFJob/TrainJob replica, a tuner worker) needs before it
    touches ``text``'s URIs: the bundled store's endpoint where the package marks it, and
    tensorflow-io's s3:// filesystem, as the steps get them (pipeline/kubeflow/entrypoint.py)."""
    if uses_bundled_store(text, environ):
        configure_environment(environ)
    register_filesystems(text)


def _map_strings(value, change: Callable[[str], str]):
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_map_strings(item, change) for item in value]
    if isinstance(value, dict):
        return {key: _map_strings(item, change) for key, item in value.items()}
    return value


def to_readable(executor_input: dict) -> dict:
    """The ExecutorInput with every ``minio://`` URI (artifact URIs and metadata) as ``s3://``."""
    return _map_strings(executor_input, readable_uri)


def restore_output_uris(output_file: str, executor_input: dict) -> bool:
    """Rewrite the ExecutorOutput file's ``s3://`` forms of the run's bundled-store URIs back to
    ``minio://``; False if none.

    Artifact URIs must come back as they were given (the launcher checks the bucket prefix).
    Metadata that names another object of the same bucket (the blessing's ``baseline_model_uri``,
    the Pusher's ``pushed_destination`` under the serving dir) is restored too: outside the step
    an ``s3://`` URI is opened through the ``kfp-launcher`` providers or AWS's default chain,
    which on a stock install is not the bundled store, so only the ``minio://`` form names the
    object that was written. Inside a bundled-store step every ``s3://`` URI is on that store
    (its only endpoint), so the bucket alone decides.
    """
    if not os.path.exists(output_file):
        return False
    buckets = {artifact["uri"][len(SCHEME):].split("/", 1)[0] for side in ("inputs", "outputs")
               for artifacts in executor_input.get(side, {}).get("artifacts", {}).values()
               for artifact in artifacts.get("artifacts", []) if artifact.get("uri", "").startswith(SCHEME)}
    prefixes = tuple(f"{S3_SCHEME}{bucket}/" for bucket in buckets)

    def restore(text: str) -> str:
        if text.startswith(prefixes) or text in {prefix.rstrip("/") for prefix in prefixes}:
            return SCHEME + text[len(S3_SCHEME):]
        return text

    with open(output_file) as handle:
        executor_output = json.load(handle)
    restored = dict(executor_output)
    restored["artifacts"] = _map_strings(executor_output.get("artifacts", {}), restore)
    if restored == executor_output:
        return False
    with open(output_file, "w") as handle:
        json.dump(restored, handle)
    return True

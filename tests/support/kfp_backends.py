"""What each KFP backend version does differently to a step's container, from its own source.

The contract emulator (kfp_contract.py, kfp_launcher.py) plays one of these. Every field cites
kubeflow/pipelines at the tag where the rule starts (``git show TAG:PATH``); the audit of every
change from 2.3.0 to the newest tag, with what the project does about each, is
docs/kubeflow/internals.md.
"""
from __future__ import annotations

import dataclasses

STANDALONE_NAMESPACE = "kubeflow"
PROFILE_NAMESPACE = "team-a"  # a multi-user profile's namespace: no Service of the store there
BUNDLED_BUCKET = "mlpipeline"


@dataclasses.dataclass(frozen=True)
class Backend:
    tag: str
    kubeflow: str  # the Kubeflow release that ships it
    #: ``<root>/<task>/<uuid>/<key>`` instead of ``<root>/<task>/<key>``: driver.go provisionOutputs
    #: (:1242@2.3.0 without; :1588@2.4.0 ``[]string{taskName, outputUriSalt, name}``).
    output_uri_salt: bool
    #: an ``executor-logs`` output (``system.Artifact``, no metadata) on every task, ``--publish_logs``
    #: defaulting to "true": driver.go:2025-2038@2.5.0, cmd/driver/main.go:85@2.5.0 (kubeflow/pipelines#11809).
    executor_logs: bool
    #: each provisioned output artifact carries ``name`` = its key, and ``outputs.outputFile`` is
    #: ``output_metadata.json`` in the task root's local path (``/minio/<bucket>/.../<task>/<uuid>/``):
    #: driver.go:692-723@2.15.0 (taskRootRemote, "Required by Pythonic artifacts").
    task_root_outputs: bool
    #: the launcher uploads and records the log even when the command failed:
    #: launcher_v2.go uploadOutputArtifacts componentSucceeded :678-684@2.16.0.
    logs_on_failure: bool
    #: the log's URI gets ``-<retry index>`` (``executor-logs-0``): launcher_v2.go
    #: qualifyExecutorLogsForRetry :531-597@2.17.0.
    logs_retry_suffix: bool
    #: the bundled store behind ``minio://``: "minio" (third-party/minio), "seaweedfs-alias" (SeaweedFS
    #: whose S3 port 8333 only the ``minio-service`` Service maps to 9000:
    #: third-party/seaweedfs/base/seaweedfs/{minio-service,seaweedfs-service}.yaml@2.15.0),
    #: "seaweedfs" (``seaweedfs`` Service with ``http-s3-compat`` 9000 -> 8333, no minio-service:
    #: seaweedfs-service.yaml:18-21@2.16.0).
    store: str
    #: multi-user: each profile's own keys, allowed only under these key prefixes of the bucket
    #: (pipelines-profile-controller/sync.py:353-373@2.15.0); MinIO installs copy the admin keys
    #: into every profile namespace (sync.py:366-377@2.3.0: the secret ``mlpipeline-minio-artifact``).
    per_profile_keys: bool
    #: a profile's batch delete (``POST ?delete``) is authorized: SeaweedFS 4.00 (2.15, 2.16:
    #: seaweedfs-deployment.yaml:30@2.15.0) checks it against the bucket alone, which the profile's
    #: prefixes never match (seaweedfs 4.00 weed/s3api/s3api_server.go:322, auth_credentials.go:523-567);
    #: 4.34 (2.17: seaweedfs-deployment.yaml:33@2.17.0) key by key (s3api_object_handlers_delete.go:447).
    profile_batch_deletes: bool = True
    #: the launcher downloads an input's keys under ``<key>/`` only, not every key starting with ``<key>``
    #: (objectstore/object_store.go DownloadBlob :123-148@2.3.0, :146-205@2.17.0).
    download_under_key_only: bool = False

    def launcher_store_endpoint(self, pod_env: dict[str, str]) -> str:
        """objectstore/config.go: the bundled store's endpoint as the launcher opens it."""
        if self.store == "seaweedfs":  # DefaultEndpointInMultiUserMode :29@2.16.0, always used
            return "seaweedfs.kubeflow:9000"
        if self.store == "seaweedfs-alias":  # DefaultMinioEndpointInMultiUserMode :29@2.15.0, always used
            return "minio-service.kubeflow:9000"
        # MinioDefaultEndpoint :164-178@2.3.0: the Service's env in its own namespace, else its DNS name
        host, port = pod_env.get("MINIO_SERVICE_SERVICE_HOST"), pod_env.get("MINIO_SERVICE_SERVICE_PORT")
        return f"{host}:{port}" if host and port else "minio-service.kubeflow:9000"

    def services(self, address: str) -> dict[str, list[tuple[str | None, int, str | None]]]:
        """The store's Services in the ``kubeflow`` namespace: name -> [(port name, service port, the address
        this machine reaches for it, None: a port of the Service that is no S3)], first port first."""
        if self.store == "minio":  # third-party/minio/base/minio-service.yaml: port 9000
            return {"minio-service": [(None, 9000, address)]}
        if self.store == "seaweedfs-alias":
            return {"minio-service": [("http", 9000, address)],
                    "seaweedfs": [("http-iam", 8111, None), ("http-s3", 8333, address), ("http-master", 9333, None)]}
        return {"seaweedfs": [("http-iam", 8111, None), ("http-s3", 8333, address), ("http-s3-compat", 9000, address),
                              ("http-master", 9333, None)]}

    def allowed_prefixes(self, namespace: str) -> tuple[str, ...] | None:
        """The keys of ``mlpipeline`` a profile's own keys may touch (None: any)."""
        if not self.per_profile_keys or namespace == STANDALONE_NAMESPACE:
            return None
        return ("artifacts/", f"private-artifacts/{namespace}/", f"private/{namespace}/", "shared/")

    def profile_pipeline_root(self, namespace: str) -> str | None:
        """The profile's ``kfp-launcher`` ``defaultPipelineRoot`` (sync.py:181@2.15.0); None: no ConfigMap key."""
        if not self.per_profile_keys:
            return None
        return f"minio://{BUNDLED_BUCKET}/private-artifacts/{namespace}/v2/artifacts"


BACKENDS = {backend.tag: backend for backend in (
    Backend("2.3.0", "1.9", output_uri_salt=False, executor_logs=False, task_root_outputs=False,
            logs_on_failure=False, logs_retry_suffix=False, store="minio", per_profile_keys=False),
    Backend("2.5.0", "1.10", output_uri_salt=True, executor_logs=True, task_root_outputs=False,
            logs_on_failure=False, logs_retry_suffix=False, store="minio", per_profile_keys=False),
    Backend("2.15.0", "1.11", output_uri_salt=True, executor_logs=True, task_root_outputs=True,
            logs_on_failure=False, logs_retry_suffix=False, store="seaweedfs-alias", per_profile_keys=True,
            profile_batch_deletes=False),
    Backend("2.17.0", "(newest tag)", output_uri_salt=True, executor_logs=True, task_root_outputs=True,
            logs_on_failure=True, logs_retry_suffix=True, store="seaweedfs", per_profile_keys=True,
            download_under_key_only=True),
)}
NEWEST = BACKENDS["2.17.0"]

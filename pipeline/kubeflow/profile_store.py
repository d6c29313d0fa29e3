"""What a multi-user profile's own keys may touch of KFP's bundled store (SeaweedFS, KFP 2.15+).

From 2.15 the profile controller gives each profile namespace keys of its own in
``mlpipeline-minio-artifact``, allowed only under four key prefixes of the ``mlpipeline`` bucket
(kubeflow/pipelines manifests/kustomize/base/installs/multi-user/pipelines-profile-controller/
sync.py:353-373@2.15.0, :385-409@2.16.0, :484-487@2.17.0), and sets the namespace's ``kfp-launcher``
``defaultPipelineRoot`` to ``minio://mlpipeline/private-artifacts/<namespace>/v2/artifacts``
(sync.py:181@2.15.0). Up to 2.14 (MinIO) it copies the store's own keys into every profile
(sync.py:366-377@2.3.0): any key of the bucket. A run whose root, serving dir or data lies
outside the four prefixes is denied at its first step, so ``deploy`` refuses it first: from the
backend version healthz reports (pipeline/kubeflow/preflight.py), and from the profile's own
``kfp-launcher`` where the cluster can be read (pipeline/kubeflow/cluster_checks.py).
"""
from __future__ import annotations

import re

BUCKET = "mlpipeline"
PROFILE_KEYS_SINCE = (2, 15, 0)
_STORE_URI = re.compile(rf"(?:minio|s3)://{BUCKET}/([^\s\"',]*)")


def prefixes(namespace: str) -> tuple[str, ...]:
    """The keys of the bucket the profile's keys may read and write, the launcher's own root first."""
    return (f"private-artifacts/{namespace}/", f"private/{namespace}/", "shared/", "artifacts/")


def per_profile_root(default_pipeline_root: str | None, namespace: str) -> bool:
    """Whether a ``kfp-launcher`` ``defaultPipelineRoot`` is the one the 2.15+ profile controller writes."""
    return (default_pipeline_root or "").startswith(f"minio://{BUCKET}/{prefixes(namespace)[0]}")


def problem(text: str, namespace: str, install: str) -> str | None:
    """One paragraph when a store URI in ``text`` lies outside the profile's prefixes; None when all are inside."""
    allowed = prefixes(namespace)
    outside = sorted({key for key in _STORE_URI.findall(text) if not (key.rstrip("/") + "/").startswith(allowed)})
    if not outside:
        return None
    root = f"minio://{BUCKET}/{allowed[0]}"
    return (f"{install}: the profile {namespace!r} has keys of its own, allowed only under "
            f"{', '.join(f'{BUCKET}/{p}' for p in allowed)} (its kfp-launcher root is {root}v2/artifacts), but the "
            f"package names {', '.join(f'{BUCKET}/{key}' for key in outside[:3])}, where the launcher and the steps "
            f"would be denied. Recompile with `python -m pipeline compile --pipeline-root {root}tfx` (and any --data "
            f"under {root} or minio://{BUCKET}/shared/), then deploy again.")

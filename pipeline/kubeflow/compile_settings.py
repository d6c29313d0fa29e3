"""``compile``'s own flags, declared once (pipeline/settings.py) like the run and pod settings: the image the
steps run, the root they write under, the package's path and the backend it targets.

Apart from compile.py, which imports TFX, because every command's parser is built at start-up.
"""
from __future__ import annotations

import dataclasses

from pipeline.kubeflow.backend_version import DEFAULT_KFP_VERSION, MAX_RETRIES
from pipeline.settings import setting

_COMPILE = frozenset({"compile"})
_BACKEND = "Kubeflow Pipelines backend"


@dataclasses.dataclass(frozen=True)
class CompileTarget:
    """Where a compiled package runs: its image and pipeline root, the file it is written to, and the backend version
    whose features it may use (pipeline/kubeflow/backend_version.py)."""

    image: str = setting(flag="--image", required=True, commands=_COMPILE,
                         help="pipeline image (built from kubeflow/Dockerfile)")
    pipeline_root: str = setting(
        flag="--pipeline-root", required=True, commands=_COMPILE,
        help="object-store URI for all outputs, e.g. gs://bucket/tfx (run artifacts under tfx/, "
        "serving/<model>/<version>); recorded in the package as its defaultPipelineRoot, which `deploy` passes to "
        "each run")
    package: str | None = setting(None, flag="--output", metavar="PACKAGE", commands=_COMPILE,
                                  help="package path", default_text=lambda: "kubeflow/<pipeline-name>.yaml")
    kfp_version: str = setting(
        DEFAULT_KFP_VERSION, flag="--kfp-version", metavar="VERSION", commands=_COMPILE, group=_BACKEND,
        help="the cluster's KFP backend version; features it would ignore are refused, and one outside the tested "
        "versions is a warning", default_text=lambda: f"{DEFAULT_KFP_VERSION}, the newest tested")
    retries: int = setting(0, flag="--retries", low=0, high=MAX_RETRIES, metavar="N", commands=_COMPILE,
                           group=_BACKEND, help="retry a failed step up to N times with backoff (needs KFP backend "
                           "2.4.1+)")

"""The KFP backend a package is compiled for, and what that backend honours (``compile --kfp-version``).

A KFP 2.x API server accepts a PipelineSpec field it does not implement and ignores it: a
package asking for retries on a backend that has none would simply never retry. So a feature
whose support depends on the backend is emitted only when the stated target honours it, and
asking for it on an older target is refused at compile time with a paragraph.

What each feature needs, read from kubeflow/pipelines ``backend/src/v2``:

- per-step retries (``PipelineTaskSpec.retryPolicy``): the Argo compiler turns it into the
  step's ``retryStrategy`` from 2.4.1 on (``compiler/argocompiler/container.go``
  getTaskRetryStrategy, added by kubeflow/pipelines#11673 and cherry-picked into 2.4.1 by #11716;
  2.4.0 and older have no retryStrategy at all), looking only at tasks of the root DAG
  (getTaskRetryPolicySpec reads ``spec.Root.GetDag().Tasks``): every task of this project's
  pipelines is one. Argo takes the backoff factor as an integer and the durations in seconds.
"""
from __future__ import annotations

import re

from pipeline.kubeflow.storage import KubeflowConfigError

#: The backends the contract tests emulate, each from its own source (tests/support/kfp_backends.py,
#: docs/kubeflow/internals.md): Kubeflow 1.9's, 1.10's, 1.11's and the newest tag.
TESTED_VERSIONS = ("2.3.0", "2.5.0", "2.15.0", "2.17.0")
#: What ``compile`` targets unless told: the newest tested backend.
DEFAULT_KFP_VERSION = TESTED_VERSIONS[-1]
#: feature -> (first backend version that honours it, where that is in the backend's source);
#: both ``compile --kfp-version`` and deploy's pre-flight (the backend's healthz version) check against it.
FEATURES = {
    "retries": ((2, 4, 1), "backend/src/v2/compiler/argocompiler/container.go getTaskRetryStrategy, from 2.4.1 "
                             "(kubeflow/pipelines#11673, cherry-picked by #11716)"),
}
RETRY_BACKOFF = {"backoffDuration": "30s", "backoffFactor": 2.0, "backoffMaxDuration": "600s"}
MAX_RETRIES = 10
def parse_version(text: str) -> tuple[int, int, int]:
    """``2.5.0`` (or ``2.5``, ``v2.5.0``) -> (2, 5, 0); anything else is a paragraph."""
    match = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?", (text or "").strip())
    if not match:
        raise KubeflowConfigError(
            f"--kfp-version {text!r} is not a KFP backend version such as 2.5.0. Give the version of the "
            "cluster's Kubeflow Pipelines backend (the KFP UI shows it at the bottom of the side bar; "
            "`kubectl -n kubeflow get deploy ml-pipeline -o jsonpath='{..image}'` names it).")
    major, minor, patch = (int(part or 0) for part in match.groups())
    if major != 2:
        raise KubeflowConfigError(
            f"--kfp-version {text}: this project compiles KFP v2 PipelineSpecs, which only a 2.x backend runs; "
            "upgrade the cluster's Kubeflow Pipelines to 2.x or give its 2.x version.")
    return major, minor, patch


def require(feature: str, flag: str, version: str) -> None:
    """Refuse ``flag`` unless the backend ``version`` honours ``feature``."""
    needed, where = FEATURES[feature]
    if parse_version(version) < needed:
        first = ".".join(map(str, needed))
        raise KubeflowConfigError(
            f"{flag} needs a Kubeflow Pipelines backend {first} or newer ({where}); the package targets "
            f"--kfp-version {version}, which accepts the setting and silently ignores it. Upgrade the "
            f"cluster's KFP to {first}+ and pass --kfp-version with its version, or drop {flag}.")


def add_retries(spec: dict, retries: int, version: str) -> dict:
    """Every root-DAG task retried up to ``retries`` times with backoff (in place); 0 leaves the spec alone."""
    parse_version(version)
    if retries < 0 or retries > MAX_RETRIES:
        raise KubeflowConfigError(f"--retries {retries}: give 0 (no retries, the default) to {MAX_RETRIES} "
                                  "retries of a failed step.")
    if not retries:
        return spec
    require("retries", f"--retries {retries}", version)
    for task in spec["root"]["dag"]["tasks"].values():
        task["retryPolicy"] = {"maxRetryCount": retries, **RETRY_BACKOFF}
    return spec


def untested_warning(version: tuple[int, int, int] | str, where: str) -> str | None:
    """A sentence for a backend that is not one of the tested versions (the package may still run), whether
    outside their range or between two of them (2.4.0: neither 2.3.0 nor 2.5.0); None for a tested one."""
    parsed = parse_version(version) if isinstance(version, str) else version
    tested = [parse_version(v) for v in TESTED_VERSIONS]
    if parsed in tested:
        return None
    shown = ".".join(map(str, parsed))
    side = ("newer than" if parsed > tested[-1] else "older than" if parsed < tested[0]
            else "not one of")
    return (f"{where} is KFP backend {shown}, {side} the versions this project is tested against "
            f"({', '.join(TESTED_VERSIONS)}: docs/kubeflow/internals.md lists what each changes for a step). "
            "The run proceeds; if a step fails at its start, compare what that backend passes a step with the "
            "audit there.")

"""Checks before ``deploy`` uploads or starts anything: the namespace, the backend's version, the cluster.

Each check is bounded (the connection's timeouts) and ends in one paragraph, so a run that could
not work is refused here instead of leaving a pod Pending or a step failing hours later:

- **the namespace** (multi-user Kubeflow): KFP's API takes the namespace from the request and
  authorizes it with a SubjectAccessReview for the caller (backend src/apiserver/resource/
  resource_manager.go ``IsAuthorized``: HTTP 403 "PermissionDenied: User '...' is not authorized");
  kfp 2.5's client only fills it from ``--namespace``, its context file or the pod's own
  namespace (kfp/client/client.py). Without ``--namespace`` the profile comes from the Kubeflow
  dashboard, which lists the caller's profiles with their roles (centraldashboard
  ``GET /api/workgroup/env-info``): one owned profile is used, several or none is a paragraph.
  A namespace the caller has no profile in is refused with the profiles it has; without the
  dashboard (e.g. a port-forward to the KFP UI), KFP's own 403 on listing the namespace's
  experiments says the same;
- **the backend's version**, from ``GET /apis/v2beta1/healthz`` (``tag_name``, backend src/apiserver/
  server/healthz_server.go): a package asking for a feature the backend ignores is refused
  (:data:`FEATURES`);
- **the cluster** (through the Kubernetes API, pipeline/kubeflow/cluster_checks.py): the secrets the
  platform spec names, the training job a ``--trainer-workers``/``--tune-workers`` package needs, and
  the ``kfp-launcher`` providers entry of an ``s3://`` root.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from pipeline.kubeflow import backend_version as compile_targets
from pipeline.kubeflow import profile_store
from pipeline.kubeflow.connection import DeployError, bounded_get

log = logging.getLogger(__name__)

ENV_INFO_PATH = "/api/workgroup/env-info"


@dataclasses.dataclass(frozen=True)
class Feature:
    """Something a package can ask for that only backends from ``since`` carry out."""

    name: str
    since: tuple[int, int, int]
    asked: Callable[[dict], bool]
    why: str


def _retries(spec: dict) -> bool:
    return any("retryPolicy" in task for task in ((spec.get("root") or {}).get("dag") or {}).get("tasks", {}).values())


# The first version of each comes from the one table `compile --kfp-version` also checks against.
FEATURES = (
    Feature("per-step retries (retryPolicy)", compile_targets.FEATURES["retries"][0], _retries,
            "older backends ignore PipelineTaskSpec.retryPolicy, so a failed step would not be retried "
            f"({compile_targets.FEATURES['retries'][1]}; root-DAG tasks only)"),
)


def backend_version(health: dict) -> tuple[int, int, int] | None:
    """``tag_name`` of the healthz answer as (major, minor, patch); None when the build does not say."""
    match = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(health.get("tag_name") or ""))
    return tuple(int(part) for part in match.groups()) if match else None  # type: ignore[return-value]


def check_backend(health: dict, spec: dict, host: str) -> None:
    """Refuse a package that asks for a feature the backend is too old for."""
    version = backend_version(health)
    if version is None:
        return
    untested = compile_targets.untested_warning(version, f"Kubeflow Pipelines at {host}")
    if untested:
        log.warning("%s", untested)
    for feature in FEATURES:
        if feature.asked(spec) and version < feature.since:
            since = ".".join(map(str, feature.since))
            raise DeployError(
                f"Kubeflow Pipelines at {host} is backend {'.'.join(map(str, version))} (healthz tag_name), but the "
                f"package asks for {feature.name}, which needs backend {since} or later: {feature.why}. Upgrade "
                f"Kubeflow Pipelines to {since}+, or recompile without it.")


def profiles(host: str, token: str | None, cookies: str | None, verify: bool | str,
             timeout: float) -> dict[str, str] | None:
    """The caller's profiles {namespace: role} as the Kubeflow dashboard lists them; None without a dashboard."""
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookies:
        headers["Cookie"] = cookies
    try:  # bounded in all and capped (pipeline/kubeflow/http_limits.py); no usable answer: no dashboard
        response, body = bounded_get(host + ENV_INFO_PATH, headers, timeout, verify, host, "listing your profiles")
    except DeployError:
        return None
    if response.status != 200:
        return None
    try:
        info = json.loads(body)
        return {entry["namespace"]: entry.get("role", "") for entry in info.get("namespaces") or []}
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def resolve_namespace(host: str, namespace: str | None, multi_user: bool, *, token: str | None,
                      cookies: str | None, verify: bool | str, timeout: float, needed: bool) -> str | None:
    """The namespace a multi-user run goes to: ``namespace`` when the caller has a profile there, else the
    caller's own profile; ``needed``: a run or schedule is asked for (an upload alone needs none)."""
    if not multi_user:
        return namespace
    if not namespace and not needed:
        return None
    listed = profiles(host, token, cookies, verify, timeout)
    if namespace:
        if listed is not None and namespace not in listed:
            raise DeployError(no_profile(host, namespace, listed))
        return namespace
    if listed is None:
        raise DeployError(
            f"Kubeflow Pipelines at {host} runs in multi-user mode, so a run or schedule needs a namespace, and no "
            f"Kubeflow dashboard answered {ENV_INFO_PATH} there to name your profile: pass --namespace <your "
            "profile namespace> (e.g. kubeflow-user-example-com).")
    if not listed:
        raise DeployError(
            f"You have no Kubeflow profile at {host} (the dashboard lists none for your identity), so there is no "
            "namespace to run in: open the dashboard once to create your profile (registration flow), or ask an "
            "administrator to add you as a contributor of one (`kubectl edit profile NAME`), then pass --namespace.")
    owned = sorted(ns for ns, role in listed.items() if role == "owner")
    if len(owned) == 1 or len(listed) == 1:
        return owned[0] if len(owned) == 1 else next(iter(listed))
    several = ", ".join(f"{ns} ({role})" for ns, role in sorted(listed.items()))
    raise DeployError(f"You have several Kubeflow profiles at {host} ({several}): pass --namespace with the one "
                      "to run in.")


def no_profile(host: str, namespace: str, listed: dict[str, str] | None) -> str:
    theirs = (f"your profiles: {', '.join(sorted(listed))}" if listed else "you have no profile") \
        if listed is not None else "the dashboard did not list your profiles"
    return (f"You have no access to the namespace {namespace!r} at {host} ({theirs}): on multi-user Kubeflow a run "
            "goes to a profile namespace you own or contribute to. Pass --namespace with one of yours, or ask the "
            f"profile's owner to add you as a contributor (Kubeflow dashboard: Manage Contributors).")


def check_namespace_access(client: Any, host: str, namespace: str) -> None:
    """List one experiment in ``namespace``: KFP's SubjectAccessReview answers 403 for a stranger."""
    import kfp_server_api

    from pipeline.kubeflow.connection import api_errors

    try:
        with api_errors(host, f"checking access to namespace {namespace!r}"):
            client.list_experiments(page_size=1, namespace=namespace)
    except DeployError as error:
        cause = error.__cause__
        if isinstance(cause, kfp_server_api.ApiException) and cause.status == 403:
            raise DeployError(no_profile(host, namespace, None) + f" The API answered: {error}") from cause
        raise


def check_profile_root(health: dict, spec: dict, namespace: str | None, root: str | None) -> None:
    """Refuse a run whose root, serving dir or data on the bundled store lie outside what the profile's
    keys may touch: multi-user KFP 2.15+ on SeaweedFS (pipeline/kubeflow/profile_store.py)."""
    version = backend_version(health)
    if not health.get("multi_user") or not namespace or version is None or version < profile_store.PROFILE_KEYS_SINCE:
        return
    problem = profile_store.problem(json.dumps(spec) + json.dumps(root or ""), namespace,
                                    f"Kubeflow Pipelines {'.'.join(map(str, version))} is multi-user on SeaweedFS")
    if problem:
        raise DeployError(problem)

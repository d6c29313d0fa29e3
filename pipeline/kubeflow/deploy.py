"""Upload a compiled KFP v2 pipeline package to Kubeflow Pipelines and optionally start a run.

The package is the YAML PipelineSpec that TFX's ``KubeflowV2DagRunner`` writes. The first
deploy of a name creates the pipeline; later deploys add a version to it, so the KFP UI keeps
the history and runs can point at exactly the version that was uploaded.

Every failure a user can fix is raised as :class:`DeployError` with one paragraph saying what
went wrong, where, and how to fix it (connection handling: pipeline/kubeflow/connection.py).

kfp prints a link after each call; those prints are swallowed (``redirect_stdout``, i.e.
process-wide while a call runs) because :class:`DeployResult` carries the same links.
"""
import datetime
import logging
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kfp

from pipeline.kubeflow.cluster_checks import STANDALONE_NAMESPACE, check_cluster
from pipeline.kubeflow.connection import (
    API_TIMEOUT_S,
    DeployError,
    api_errors,
    bound_client_io,
    check_health,
    normalize_host,
)
from pipeline.kubeflow.login import Credentials
from pipeline.kubeflow.login import credentials as login
from pipeline.kubeflow.package import default_pipeline_name, load_pipeline_spec, run_pipeline_root, yaml_named
from pipeline.kubeflow.preflight import (
    check_backend,
    check_namespace_access,
    check_profile_root,
    profiles,
    resolve_namespace,
)
from pipeline.kubeflow.runtime_parameters import parse_assignments
from pipeline.kubeflow.schedule import check_cron, create_schedule
from pipeline.kubeflow.wait import follow_run

log = logging.getLogger(__name__)

__all__ = ["DeployError", "DeployResult", "deploy", "load_pipeline_spec"]


@dataclass
class DeployResult:
    """What was uploaded (and started), with ids for scripts and links for people."""

    pipeline_id: str
    version_id: str
    created_pipeline: bool
    run_id: str | None = None
    run_url: str | None = None
    pipeline_name: str = ""
    version_name: str = ""
    experiment_id: str | None = None
    pipeline_url: str | None = None
    recurring_run_id: str | None = None
    schedule: str | None = None

    def summary(self) -> str:
        """Human-readable lines for the CLI."""
        what = "Created pipeline" if self.created_pipeline else "Uploaded new version of pipeline"
        lines = [f"{what} {self.pipeline_name!r} (id {self.pipeline_id}), "
                 f"version {self.version_name!r} (id {self.version_id})"]
        if self.pipeline_url:
            lines.append(f"Pipeline: {self.pipeline_url}")
        if self.run_id:
            lines.append(f"Started run {self.run_id} in experiment {self.experiment_id}")
            if self.run_url:
                lines.append(f"Run: {self.run_url}")
        if self.recurring_run_id:
            lines.append(f"Scheduled recurring run {self.recurring_run_id} ({self.schedule}) in experiment "
                         f"{self.experiment_id}; list: deploy --list-schedules, stop: deploy --delete-schedule "
                         f"{self.recurring_run_id}")
        return "\n".join(lines)


# --------------------------------------------------------------------------- deploy


def connect(host: str, *, namespace: str | None = None, token: str | None = None, cookies: str | None = None,
            timeout: float = 10.0, api_timeout: float = 300.0,
            client_factory: Callable[..., Any] = kfp.Client, verify: bool | str = True) -> Any:
    """A kfp client for ``host`` whose every HTTP call is bounded (stackenv/compat.py); ``verify``: the TLS
    check (a CA file, or False), as kfp.Client's ``ssl_ca_cert`` / ``verify_ssl`` take it."""
    kwargs: dict[str, Any] = {"host": host}
    if isinstance(verify, str):
        kwargs["ssl_ca_cert"] = verify
    elif verify is False:
        kwargs["verify_ssl"] = False
    if namespace:
        kwargs["namespace"] = namespace
    if token:
        kwargs["existing_token"] = token
    if cookies:
        kwargs["cookies"] = cookies
    with api_errors(host, "connecting the kfp client", api_timeout), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2+"
        client = client_factory(**kwargs)
    bound_client_io(client, timeout, api_timeout, host)
    return client


def _utc_stamp() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")


def _ui_url(host: str, fragment: str) -> str:
    ui = os.environ.get("KF_PIPELINES_UI_ENDPOINT") or host
    return f"{ui.rstrip('/')}/#/{fragment}"


def deploy(host: str, package_path: str, pipeline_name: str | None = None,
           experiment: str = "Default", run: bool = False, namespace: str | None = None,
           run_name: str | None = None, client_factory: Callable[..., Any] = kfp.Client, *,
           version_name: str | None = None, description: str | None = None,
           pipeline_root: str | None = None, existing_token: str | None = None,
           cookies: str | None = None, timeout: float = 10.0,
           api_timeout: float = 300.0, enable_caching: bool | None = None,
           service_account: str | None = None, wait_timeout: float | None = None,
           schedule: str | None = None, say: Callable[[str], None] = print,
           credentials: Credentials | None = None, cluster_checks: bool = True,
           parameters: Sequence[str] | Mapping[str, Any] = ()) -> DeployResult:
    """Upload ``package_path`` to KFP at ``host`` as a new pipeline or a new version; maybe run it.

    Pipelines are looked up and uploaded as shared pipelines (what ``kfp.Client.get_pipeline_id``
    sees); ``namespace`` scopes the experiment and the run, which multi-user Kubeflow requires.
    ``credentials`` (pipeline/kubeflow/login.py: a token, Dex, a session cookie, IAP, and the TLS check), else
    ``existing_token`` (or the file named by ``KF_PIPELINES_SA_TOKEN_PATH``) and ``cookies``, authenticate;
    on multi-user Kubeflow the namespace defaults to the caller's profile and is checked before anything
    is uploaded, as is the backend's version against what the package asks for
    (pipeline/kubeflow/preflight.py), and, for a run or schedule, what the package needs of the cluster
    (``cluster_checks``: pipeline/kubeflow/cluster_checks.py); ``timeout`` bounds connecting, the health
    check and each cluster read, ``api_timeout`` each API answer. ``pipeline_root`` overrides the package's
    ``defaultPipelineRoot`` for the run.
    ``enable_caching`` (True/False) overrides every step's caching in the uploaded version:
    kfp 2.5's ``run_pipeline(enable_caching=...)`` ignores it for a run of an uploaded version.
    ``service_account`` runs the pods under that Kubernetes service account. With
    ``wait_timeout`` the run is followed until it ends (pipeline/kubeflow/wait.py). With
    ``schedule`` (a cron, checked before anything is sent: pipeline/kubeflow/schedule.py) a
    recurring run of the uploaded version is created in ``experiment``. ``parameters``
    (``NAME=VALUE`` texts or a mapping) set the package's runtime parameters of the run and
    schedule, typed and checked first (pipeline/kubeflow/runtime_parameters.py).
    Raises DeployError (ConfigError for a bad schedule) for anything the user can fix.
    """
    cron = check_cron(schedule) if schedule is not None else None
    spec = load_pipeline_spec(package_path)
    if isinstance(parameters, Mapping):
        parameters = [f"{name}={value}" for name, value in parameters.items()]
    params = parse_assignments(spec, parameters) if parameters else {}
    starts = bool(run or cron)
    root = run_pipeline_root(spec, package_path, pipeline_root, starts)
    name = (pipeline_name or "").strip() or default_pipeline_name(spec, package_path)
    host = normalize_host(host)
    creds = credentials or login(host, existing_token=existing_token, cookies=cookies, timeout=timeout)
    session = _open_session(host, spec, creds, namespace, needed=starts, timeout=timeout, api_timeout=api_timeout,
                            client_factory=client_factory, root=root)
    if cluster_checks and starts:
        check_cluster(package_path, root, session.run_namespace, timeout=timeout)
    result = _upload(session, package_path, name, version_name=version_name, description=description,
                     enable_caching=enable_caching)
    if not starts:
        return result
    result.experiment_id = experiment_id = _experiment_id(session, experiment)
    if cron:
        _schedule(session, result, experiment_id, cron, run_name=run_name, root=root, service_account=service_account,
                  params=params)
    if run:
        _start_run(session, result, experiment_id, run_name=run_name, root=root, service_account=service_account,
                   params=params)
        if wait_timeout is not None and result.run_id:
            say(result.summary())
            _follow(session, result.run_id, wait_timeout, say)
    return result


@dataclass
class _Session:
    """A logged-in, bounded kfp client and the namespace its runs go to (None: the client's default)."""

    host: str
    client: Any
    namespace: str | None
    multi_user: bool
    api_timeout: float = API_TIMEOUT_S  # each API call's deadline (--api-timeout)

    @property
    def run_namespace(self) -> str:
        """Where the run's pods start: the profile namespace on multi-user Kubeflow; standalone KFP starts them
        in its own namespace, ``--namespace`` if it is not the usual one."""
        return self.namespace or STANDALONE_NAMESPACE


def _open_session(host: str, spec: dict, creds: Credentials, namespace: str | None, *, needed: bool,
                  timeout: float, api_timeout: float, client_factory: Callable[..., Any],
                  root: str | None = None) -> _Session:
    """Connect, with the checks only the server's answers allow, before anything is uploaded.

    The bounded health check comes first (kfp's own retries for minutes); its answer names the backend's
    version (checked against what the package asks for) and whether it is multi-user, which decides the
    namespace; kfp binds the namespace into the client, so it is settled before the client is built, and
    its access is confirmed through KFP's own authorization when no dashboard listed the caller's profiles.
    """
    health = check_health(host, timeout=timeout, token=creds.token, cookies=creds.cookies, verify=creds.verify)
    check_backend(health, spec, host)
    multi_user = bool(health.get("multi_user"))
    namespace = resolve_namespace(host, namespace, multi_user, token=creds.token, cookies=creds.cookies,
                                  verify=creds.verify, timeout=timeout, needed=needed)
    if needed:  # a run or schedule writes under its root: what the profile's keys may touch
        check_profile_root(health, spec, namespace, root)
    client = connect(host, namespace=namespace, token=creds.token, cookies=creds.cookies, timeout=timeout,
                     api_timeout=api_timeout, client_factory=client_factory, verify=creds.verify)
    if multi_user and namespace and profiles(host, creds.token, creds.cookies, creds.verify, timeout) is None:
        check_namespace_access(client, host, namespace)  # no dashboard confirmed it: KFP's own authorization
    return _Session(host, client, namespace, multi_user, api_timeout)


def _upload(session: _Session, package_path: str, name: str, *, version_name: str | None,
            description: str | None, enable_caching: bool | None) -> DeployResult:
    """The package as a new pipeline, or as a new version of the pipeline of that name.

    A new version rather than a new pipeline keeps the history in the KFP UI, and runs point at exactly
    the version uploaded here. Uploading a pipeline creates its first version but does not return its id,
    so it is read back as the newest version.
    """
    host, client = session.host, session.client
    with api_errors(host, f"looking up pipeline {name!r}", session.api_timeout):
        pipeline_id = client.get_pipeline_id(name)
    created = pipeline_id is None
    with yaml_named(package_path, enable_caching) as upload_path:
        if created:
            with api_errors(host, f"uploading {package_path} as new pipeline {name!r}", session.api_timeout):
                pipeline = client.upload_pipeline(upload_path, pipeline_name=name, description=description)
            pipeline_id = pipeline.pipeline_id
            with api_errors(host, f"listing the versions of new pipeline {pipeline_id}", session.api_timeout):
                versions = client.list_pipeline_versions(pipeline_id, page_size=10,
                                                         sort_by="created_at desc").pipeline_versions
            if not versions:
                raise DeployError(f"Kubeflow Pipelines at {host} created pipeline {name!r} (id "
                                  f"{pipeline_id}) but reports no version of it; open it in the KFP "
                                  "UI, delete it if it is broken, and deploy again.")
            version_id, version = versions[0].pipeline_version_id, versions[0].display_name or name
        else:
            version = version_name or f"{name}-{_utc_stamp()}"
            with api_errors(host, f"uploading {package_path} as version {version!r} of pipeline "
                                  f"{name!r} ({pipeline_id})", session.api_timeout):
                uploaded = client.upload_pipeline_version(upload_path, version, pipeline_id=pipeline_id,
                                                          description=description)
            version_id = uploaded.pipeline_version_id
    log.info("%s pipeline %s (%s), version %s (%s)", "Created" if created else "Updated", name,
             pipeline_id, version, version_id)
    return DeployResult(pipeline_id=pipeline_id, version_id=version_id, created_pipeline=created,
                        pipeline_name=name, version_name=version,
                        pipeline_url=_ui_url(host, f"pipelines/details/{pipeline_id}/version/{version_id}"))


def _experiment_id(session: _Session, experiment: str) -> str:
    """The experiment runs and schedules go in: ``create_experiment`` returns the existing one of that name
    in the namespace, so a second deploy reuses it."""
    where = f" in namespace {session.namespace!r}" if session.namespace else ""
    with api_errors(session.host, f"getting or creating experiment {experiment!r}{where}", session.api_timeout):
        return session.client.create_experiment(experiment, namespace=session.namespace).experiment_id


def _schedule(session: _Session, result: DeployResult, experiment_id: str, cron: str, *, run_name: str | None,
              root: str | None, service_account: str | None, params: dict | None = None) -> None:
    """A recurring run of exactly the uploaded version, so a later upload does not change what it runs."""
    result.schedule = cron
    result.recurring_run_id = create_schedule(
        session.client, session.host, experiment_id=experiment_id,
        name=run_name or f"{result.pipeline_name} every {cron}", pipeline_id=result.pipeline_id,
        version_id=result.version_id, cron=cron, pipeline_root=root, service_account=service_account,
        params=params)
    log.info("Scheduled recurring run %s (%s)", result.recurring_run_id, cron)


def _start_run(session: _Session, result: DeployResult, experiment_id: str, *, run_name: str | None, root: str | None,
               service_account: str | None, params: dict | None = None) -> None:
    """One run of the uploaded version, with the run's root passed explicitly: the backend never reads the
    package's own (:func:`run_pipeline_root`)."""
    job_name = run_name or f"{result.pipeline_name} {_utc_stamp()}"
    with api_errors(session.host, f"starting run {job_name!r} of pipeline {result.pipeline_name!r}",
                    session.api_timeout):
        started = session.client.run_pipeline(experiment_id, job_name, pipeline_id=result.pipeline_id,
                                              version_id=result.version_id, pipeline_root=root,
                                              service_account=service_account, params=params or None)
    result.run_id = started.run_id
    result.run_url = _ui_url(session.host, f"runs/details/{started.run_id}") if started.run_id else None
    log.info("Started run %s in experiment %s", result.run_id, result.experiment_id)


def _follow(session: _Session, run_id: str, wait_timeout: float, say: Callable[[str], None]) -> None:
    """Follow the run until it ends or ``wait_timeout`` passes (pipeline/kubeflow/wait.py); each poll goes
    through the bounded client, and its errors become the same paragraphs as the other calls'."""
    def get_run(run_id: str) -> Any:
        with api_errors(session.host, f"following run {run_id}", session.api_timeout):  # swallows kfp's prints
            return session.client.get_run(run_id)

    follow_run(get_run, run_id, wait_timeout, namespace=session.namespace, say=say)

"""Upload a compiled KFP v2 pipeline package to Kubeflow Pipelines and optionally start a run.

The package is the YAML PipelineSpec that TFX's ``KubeflowV2DagRunner`` writes. The first
deploy of a name creates the pipeline; later deploys add a version to it, so the KFP UI keeps
the history and runs can point at exactly the version that was uploaded.

Every failure a user can fix is raised as :class:`DeployError` with one paragraph saying what
went wrong, where, and how to fix it. A quick health check with short timeouts runs before
the kfp client is built: kfp 2.5 retries its own health check five times with 5 s sleeps and
urllib3 has no timeout by default, so an unreachable host would otherwise hang for minutes.
The client's own calls then get timeouts too, and POSTs are never re-sent (no duplicates).

kfp prints a link after each call; those prints are swallowed (``redirect_stdout``, i.e.
process-wide while a call runs) because :class:`DeployResult` carries the same links.
"""
import contextlib
import datetime
import io
import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import certifi
import kfp
import kfp_server_api
import urllib3
import yaml

from stackenv.compat import bound_kfp_client_io as _bound_client_io
from stackenv.errors import ProjectError

log = logging.getLogger(__name__)

#: Top-level keys every KFP v2 PipelineSpec has (kfp's and TFX's compilers both write them).
SPEC_KEYS = ("pipelineInfo", "root", "deploymentSpec", "components", "schemaVersion")
HEALTHZ_PATH = "/apis/v2beta1/healthz"
#: kfp reads a ServiceAccount token from this file in-cluster; we honour it for any host.
TOKEN_PATH_ENV = "KF_PIPELINES_SA_TOKEN_PATH"
PORT_FORWARD_HINT = ("If KFP runs in a Kubernetes cluster, forward its UI service first with "
                     "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and pass "
                     "`--host http://localhost:8080`; otherwise check the URL, scheme (http/https) and port.")
AUTH_HINT = ("Authenticate with a bearer token: put a ServiceAccount token in a file and export "
             f"{TOKEN_PATH_ENV}=<file> (e.g. `kubectl -n <namespace> create token default-editor "
             "--audience=pipelines.kubeflow.org > token`), or pass the token in code as "
             "deploy(existing_token=...) / kfp.Client(existing_token=...); behind Dex/oauth2-proxy "
             "a session cookie works too (deploy(cookies='authservice_session=...')).")
NAMESPACE_HINT = ("On multi-user Kubeflow, pass --namespace <your profile namespace> and make sure "
                  "your identity is a contributor of that profile.")


class DeployError(ProjectError):
    """A deploy problem the user can fix; the message is the whole report, on one line."""

    def __init__(self, message: str) -> None:
        # Server texts and YAML errors span lines; the CLI prints one "error: ..." line.
        super().__init__(" ".join(str(message).split()))


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
        return "\n".join(lines)


# --------------------------------------------------------------------------- package


def load_pipeline_spec(package_path: str) -> dict:
    """Parse and sanity-check the package, so a wrong file fails here and not on the server."""
    path = Path(package_path)
    how_to_compile = ("Compile the pipeline with TFX's KubeflowV2DagRunner and an output_filename "
                      "ending in .yaml (e.g. output_filename='pipeline.yaml') and pass that file.")
    if not path.is_file():
        state = "is a directory, not a file" if path.is_dir() else "does not exist"
        raise DeployError(f"Pipeline package {path} {state}. {how_to_compile}")
    if path.name.endswith((".tar.gz", ".tgz", ".zip")):
        raise DeployError(
            f"Pipeline package {path} is an archive; this command expects the KFP v2 PipelineSpec "
            "YAML itself (TFX's v1 KubeflowDagRunner writes Argo .tar.gz packages, which the KFP v2 "
            f"API cannot run). {how_to_compile}")
    try:
        documents = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    except (UnicodeDecodeError, yaml.YAMLError) as error:
        detail = str(error).strip().replace("\n", " ")
        raise DeployError(f"Pipeline package {path} is not a YAML file ({detail}). "
                          f"{how_to_compile}") from error
    except OSError as error:
        raise DeployError(f"Cannot read pipeline package {path}: {error.strerror}. "
                          "Check the file's permissions.") from error
    spec = documents[0] if documents else None
    if isinstance(spec, dict) and isinstance(spec.get("pipelineSpec"), dict):
        raise DeployError(
            f"Pipeline package {path} is a Vertex AI PipelineJob (TFX writes that format when "
            "output_filename ends in .json), not a KFP PipelineSpec. " + how_to_compile)
    if isinstance(spec, dict) and spec.get("kind") == "Workflow":
        raise DeployError(
            f"Pipeline package {path} is a KFP v1 Argo Workflow; the KFP v2 API needs a v2 "
            f"PipelineSpec. {how_to_compile}")
    missing = [key for key in SPEC_KEYS if not isinstance(spec, dict) or key not in spec]
    if missing:
        found = ", ".join(sorted(map(str, spec))[:8]) if isinstance(spec, dict) else type(spec).__name__
        raise DeployError(
            f"Pipeline package {path} is not a KFP v2 PipelineSpec: missing top-level "
            f"{', '.join(missing)} (found: {found or 'nothing'}). {how_to_compile}")
    if not str(spec["schemaVersion"]).startswith("2."):
        raise DeployError(
            f"Pipeline package {path} has schemaVersion {spec['schemaVersion']!r}; the KFP v2 API "
            f"needs a 2.x PipelineSpec. {how_to_compile}")
    return spec


def default_pipeline_name(spec: dict, package_path: str) -> str:
    """``pipelineInfo.name`` (what TFX sets from the pipeline name), else the file stem."""
    name = (spec.get("pipelineInfo") or {}).get("name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    return Path(package_path).stem


@contextlib.contextmanager
def _yaml_named(package_path: str) -> Iterator[str]:
    """Yield a path ending in .yaml with the package's bytes.

    The KFP server picks the parser by the uploaded file name and (up to 2.0) rejects
    anything not named .yaml/.yml; JSON is valid YAML, so a copy under a .yaml name works.
    """
    if package_path.endswith((".yaml", ".yml")):
        yield package_path
        return
    folder = tempfile.mkdtemp(prefix="kfp-deploy-")
    try:
        target = os.path.join(folder, Path(package_path).stem + ".yaml")
        shutil.copyfile(package_path, target)
        yield target
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# --------------------------------------------------------------------------- connection


def normalize_host(host: str) -> str:
    """Same defaulting as kfp.Client (https when no scheme), without a trailing slash."""
    host = (host or "").strip()
    if not host:
        raise DeployError("No Kubeflow Pipelines host given. Pass --host with the KFP API/UI URL, "
                          "e.g. --host http://localhost:8080. " + PORT_FORWARD_HINT)
    if not host.startswith(("http://", "https://")):
        host = "https://" + host
    return host.rstrip("/")


def resolve_token(existing_token: str | None) -> str | None:
    """The explicit token, else the one in the file that ``KF_PIPELINES_SA_TOKEN_PATH`` names."""
    if existing_token:
        return existing_token
    token_path = os.environ.get(TOKEN_PATH_ENV)
    if not token_path:
        return None
    try:
        token = Path(token_path).read_text().strip()
    except OSError as error:
        raise DeployError(f"{TOKEN_PATH_ENV} is set to {token_path}, but that file cannot be read "
                          f"({error.strerror}). Point it at a file holding a KFP token, or unset "
                          "it.") from error
    if not token:
        raise DeployError(f"{TOKEN_PATH_ENV} points at {token_path}, which is empty. Write a KFP "
                          "token into it, or unset the variable.")
    return token


def _server_message(body: Any) -> str:
    """The server's own explanation from a grpc-gateway/KFP error body, else its text."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    text = (body or "").strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        for key in ("message", "error_message", "error", "error_details"):
            if isinstance(data.get(key), str) and data[key].strip():
                text = data[key]
                break
    text = " ".join(text.split())
    return text[:500] + ("..." if len(text) > 500 else "") if text else "(empty response body)"


def _unreachable(host: str, reason: str) -> DeployError:
    return DeployError(f"Cannot reach the Kubeflow Pipelines API at {host} ({reason}). {PORT_FORWARD_HINT}")


def _auth_error(host: str, status: int, doing: str, server_text: str) -> DeployError:
    kind = ("is not authenticated" if status in (401, 302, 303, 307, 308)
            else "is authenticated but not allowed to do this")
    return DeployError(
        f"Kubeflow Pipelines at {host} refused the request while {doing} (HTTP {status}: "
        f"{server_text}): the caller {kind}. {AUTH_HINT} {NAMESPACE_HINT}")


_DNS_FAILURES = ("Name or service not known", "nodename nor servname", "Temporary failure in name "
                 "resolution", "No address associated with hostname", "getaddrinfo failed")


def _connection_reason(error: BaseException) -> str:
    """A short, specific reason for a urllib3 failure (DNS, refused, timeout, TLS)."""
    reason = getattr(error, "reason", None)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and reason is not None:
        error = reason
    text = str(error)
    # Before the timeout check: urllib3's NewConnectionError subclasses ConnectTimeoutError.
    if any(marker in text for marker in _DNS_FAILURES):
        return "the host name does not resolve (DNS)"
    if "Connection refused" in text:
        return "connection refused: nothing listens on that port"
    if isinstance(error, urllib3.exceptions.SSLError):
        return f"TLS error: {text}; for a self-signed certificate use the http:// port-forward instead"
    if isinstance(error, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError)):
        return f"no answer in time: {type(error).__name__}"
    return f"{type(error).__name__}: {text}"


def check_health(host: str, timeout: float = 10.0, token: str | None = None,
                 cookies: str | None = None) -> dict:
    """GET the KFP health endpoint once, with short timeouts and no retries or redirects.

    Returns the health JSON (``multi_user`` tells whether a namespace is needed). Fails fast
    with a DeployError for an unreachable host, an auth proxy's login redirect, 401/403, or a
    server that is not a KFP v2 API.
    """
    url = host + HEALTHZ_PATH
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    if cookies:
        headers["Cookie"] = cookies
    http = urllib3.PoolManager(cert_reqs="CERT_REQUIRED", ca_certs=certifi.where())
    try:
        response = http.request("GET", url, headers=headers, retries=False, redirect=False,
                                timeout=urllib3.Timeout(connect=timeout, read=timeout))
    except urllib3.exceptions.HTTPError as error:
        raise _unreachable(host, _connection_reason(error)) from error
    finally:
        http.clear()
    text = _server_message(response.data)
    if response.status in (301, 302, 303, 307, 308):
        location = response.headers.get("Location", "?")
        detail = f"redirect to {location}, i.e. a login page of an authentication proxy"
        raise _auth_error(host, response.status, "checking the API health", detail)
    if response.status in (401, 403):
        raise _auth_error(host, response.status, "checking the API health", text)
    if response.status == 404:
        raise DeployError(
            f"{url} answered HTTP 404: {host} does not serve the Kubeflow Pipelines v2 API "
            "(KFP 2.x backend needed). Pass the KFP UI or API server URL as --host. " + PORT_FORWARD_HINT)
    if not 200 <= response.status < 300:
        raise DeployError(f"Kubeflow Pipelines at {host} answered the health check ({url}) with "
                          f"HTTP {response.status}: {text}. Check the ml-pipeline deployment "
                          "(`kubectl -n kubeflow get pods`) and its logs.")
    try:
        health = json.loads(response.data or b"{}")
        if not isinstance(health, dict):
            raise ValueError(type(health).__name__)
    except ValueError as error:
        raise DeployError(
            f"{url} answered HTTP {response.status} but not with the KFP health JSON "
            f"({response.headers.get('Content-Type', 'no content type')}: {text[:120]}); this is "
            f"usually the login page of an authentication proxy in front of Kubeflow. {AUTH_HINT}"
        ) from error
    return health


@contextlib.contextmanager
def _api_errors(host: str, doing: str) -> Iterator[None]:
    """Turn kfp/kfp_server_api/urllib3 failures into one DeployError paragraph."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):  # kfp prints links; we report our own
            yield
    except DeployError:
        raise
    except kfp_server_api.ApiException as error:
        status = error.status or 0
        if status in (401, 403) or 300 <= status < 400:
            raise _auth_error(host, status, doing, _server_message(error.body)) from error
        if status == 0:  # kfp_server_api's wrapper for TLS errors and unsendable requests
            raise _unreachable(host, " ".join(str(error.reason).split())) from error
        raise DeployError(
            f"Kubeflow Pipelines at {host} failed while {doing}: HTTP {status} {error.reason or ''}"
            f" - {_server_message(error.body)}. Fix what the server reports; for HTTP 5xx check "
            "the ml-pipeline pod's logs (`kubectl -n kubeflow logs deploy/ml-pipeline`).") from error
    except urllib3.exceptions.HTTPError as error:
        cause = getattr(error, "reason", None) or error
        if isinstance(cause, urllib3.exceptions.ReadTimeoutError):  # reachable, but no answer
            raise DeployError(
                f"Kubeflow Pipelines at {host} accepted the connection but did not answer in time "
                f"while {doing} ({type(cause).__name__}). The API server may be overloaded or "
                "restarting: check `kubectl -n kubeflow get pods`, then deploy again (or raise "
                "api_timeout).") from error
        raise _unreachable(host, f"while {doing}: {_connection_reason(error)}") from error
    except (TimeoutError, ConnectionError) as error:
        raise _unreachable(host, f"while {doing}: {error}") from error
    except ValueError as error:  # kfp's own checks, e.g. two pipelines with the same name
        hint = ("Rename or delete the duplicate in the KFP UI, or pass another --pipeline-name."
                if str(error).startswith("Multiple") else
                "Check that --host points at a KFP 2.x API and the package is a valid PipelineSpec.")
        raise DeployError(f"Cannot deploy to {host} while {doing}: {error}. {hint}") from error


# --------------------------------------------------------------------------- deploy


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
           api_timeout: float = 300.0) -> DeployResult:
    """Upload ``package_path`` to KFP at ``host`` as a new pipeline or a new version; maybe run it.

    Pipelines are looked up and uploaded as shared pipelines (what ``kfp.Client.get_pipeline_id``
    sees); ``namespace`` scopes the experiment and the run, which multi-user Kubeflow requires.
    ``existing_token`` (or the file named by ``KF_PIPELINES_SA_TOKEN_PATH``) and ``cookies``
    authenticate; ``timeout`` bounds connecting and the health check, ``api_timeout`` each API
    answer. ``pipeline_root`` overrides the server's default artifact root for the run (the
    TFX YAML spec does not carry one). Raises DeployError for anything the user can fix.
    """
    spec = load_pipeline_spec(package_path)
    name = (pipeline_name or "").strip() or default_pipeline_name(spec, package_path)
    host = normalize_host(host)
    token = resolve_token(existing_token)

    health = check_health(host, timeout=timeout, token=token, cookies=cookies)
    multi_user = bool(health.get("multi_user"))
    if run and multi_user and not namespace:
        raise DeployError(
            f"Kubeflow Pipelines at {host} runs in multi-user mode, so a run needs a namespace: pass "
            "--namespace <your profile namespace> (e.g. kubeflow-user-example-com).")

    kwargs: dict[str, Any] = {"host": host}
    if namespace:
        kwargs["namespace"] = namespace
    if token:
        kwargs["existing_token"] = token
    if cookies:
        kwargs["cookies"] = cookies
    with _api_errors(host, "connecting the kfp client"), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # "only works with KFP v2.0.0-beta.2+"
        client = client_factory(**kwargs)
    _bound_client_io(client, timeout, api_timeout)

    with _api_errors(host, f"looking up pipeline {name!r}"):
        pipeline_id = client.get_pipeline_id(name)
    created = pipeline_id is None
    with _yaml_named(package_path) as upload_path:
        if created:
            with _api_errors(host, f"uploading {package_path} as new pipeline {name!r}"):
                pipeline = client.upload_pipeline(upload_path, pipeline_name=name, description=description)
            pipeline_id = pipeline.pipeline_id
            # Uploading a pipeline also creates its first version; the answer lacks its id.
            with _api_errors(host, f"listing the versions of new pipeline {pipeline_id}"):
                versions = client.list_pipeline_versions(pipeline_id, page_size=10,
                                                         sort_by="created_at desc").pipeline_versions
            if not versions:
                raise DeployError(f"Kubeflow Pipelines at {host} created pipeline {name!r} (id "
                                  f"{pipeline_id}) but reports no version of it; open it in the KFP "
                                  "UI, delete it if it is broken, and deploy again.")
            version_id, version = versions[0].pipeline_version_id, versions[0].display_name or name
        else:
            version = version_name or f"{name}-{_utc_stamp()}"
            with _api_errors(host, f"uploading {package_path} as version {version!r} of pipeline "
                                   f"{name!r} ({pipeline_id})"):
                uploaded = client.upload_pipeline_version(upload_path, version, pipeline_id=pipeline_id,
                                                          description=description)
            version_id = uploaded.pipeline_version_id
    log.info("%s pipeline %s (%s), version %s (%s)", "Created" if created else "Updated", name,
             pipeline_id, version, version_id)
    result = DeployResult(pipeline_id=pipeline_id, version_id=version_id, created_pipeline=created,
                          pipeline_name=name, version_name=version,
                          pipeline_url=_ui_url(host, f"pipelines/details/{pipeline_id}/version/{version_id}"))
    if not run:
        return result

    where = f" in namespace {namespace!r}" if namespace else ""
    with _api_errors(host, f"getting or creating experiment {experiment!r}{where}"):
        # create_experiment returns the existing experiment of that name in the namespace.
        result.experiment_id = client.create_experiment(experiment, namespace=namespace).experiment_id
    job_name = run_name or f"{name} {_utc_stamp()}"
    with _api_errors(host, f"starting run {job_name!r} of pipeline {name!r}"):
        started = client.run_pipeline(result.experiment_id, job_name, pipeline_id=pipeline_id,
                                      version_id=version_id, pipeline_root=pipeline_root)
    result.run_id = started.run_id
    result.run_url = _ui_url(host, f"runs/details/{started.run_id}") if started.run_id else None
    log.info("Started run %s in experiment %s", result.run_id, result.experiment_id)
    return result

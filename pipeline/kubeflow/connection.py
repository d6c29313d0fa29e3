"""Talking to a KFP 2.x API: host and token handling, a bounded health check, error paragraphs.

A quick health check with short timeouts runs before the kfp client is built: kfp 2.5
retries its own health check five times with 5 s sleeps and urllib3 has no timeout by
default, so an unreachable host would otherwise hang for minutes. The client's own calls
then get timeouts too, and POSTs are never re-sent (no duplicates).
"""
import contextlib
import io
import json
import os
from collections.abc import Iterator
from typing import Any

from stackenv import user_files
from stackenv.compat import bound_kfp_client_io
from stackenv.errors import ProjectError

import certifi
import kfp_server_api
import urllib3

from pipeline.kubeflow.http_limits import API_BODY_BYTES, SMALL_BODY_BYTES, deadline, read_capped

HEALTHZ_PATH = "/apis/v2beta1/healthz"
#: kfp reads a ServiceAccount token from this file in-cluster; we honour it for any host.
TOKEN_PATH_ENV = "KF_PIPELINES_SA_TOKEN_PATH"
PORT_FORWARD_HINT = ("If KFP runs in a Kubernetes cluster, forward its UI service first with "
                     "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80` and pass "
                     "`--host http://localhost:8080`; otherwise check the URL, scheme (http/https) and port.")
AUTH_HINT = ("Authenticate with a bearer token: --token-file FILE (or export "
             f"{TOKEN_PATH_ENV}=<file>) holding e.g. `kubectl -n <namespace> create token default-editor "
             "--audience=pipelines.kubeflow.org`, or in code deploy(existing_token=...); behind Dex log in with "
             "--dex-user USER and the password in $KFP_DEX_PASSWORD, or pass a browser's session cookie "
             "with --session-cookie-file (authservice_session=... / oauth2_proxy_kubeflow=...); behind IAP on GKE "
             "pass --iap-client-id CLIENT_ID.")
NAMESPACE_HINT = ("On multi-user Kubeflow, pass --namespace <your profile namespace> and make sure "
                  "your identity is a contributor of that profile.")


class DeployError(ProjectError):
    """A deploy problem the user can fix; the message is the whole report, on one line."""

    def __init__(self, message: str) -> None:
        # Server texts and YAML errors span lines; the CLI prints one "error: ..." line.
        super().__init__(" ".join(str(message).split()))


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
        token = user_files.read_user_file(token_path, flag=TOKEN_PATH_ENV, what="a KFP token",
                                          max_bytes=user_files.SECRET_MAX_BYTES).strip()
    except user_files.UserFileError as error:
        raise DeployError(f"{error.paragraph} Point {TOKEN_PATH_ENV} at a file holding a KFP token, or unset "
                          "it.") from None
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
        return (f"TLS error: {text}; for a certificate of a private CA pass --ca-bundle CA.pem (or, on a trusted "
                "network only, --no-verify-tls), or use the http:// port-forward")
    if isinstance(error, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.ReadTimeoutError)):
        return f"no answer in time: {type(error).__name__}"
    return f"{type(error).__name__}: {text}"


def pool_manager(verify: bool | str = True) -> urllib3.PoolManager:
    """urllib3 with the TLS check ``verify`` asks for: the system's CAs (True), a CA file, or none (False)."""
    if verify is False:
        urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
        return urllib3.PoolManager(cert_reqs="CERT_NONE")
    return urllib3.PoolManager(cert_reqs="CERT_REQUIRED",
                               ca_certs=verify if isinstance(verify, str) else certifi.where())


def check_health(host: str, timeout: float = 10.0, token: str | None = None,
                 cookies: str | None = None, verify: bool | str = True) -> dict:
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
    response, body = bounded_get(url, headers, timeout, verify, host, "checking the API health")
    text = _server_message(body)
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
        health = json.loads(body or b"{}")
        if not isinstance(health, dict):
            raise ValueError(type(health).__name__)
    except ValueError as error:
        raise DeployError(
            f"{url} answered HTTP {response.status} but not with the KFP health JSON "
            f"({response.headers.get('Content-Type', 'no content type')}: {text[:120]}); this is "
            f"usually the login page of an authentication proxy in front of Kubeflow. {AUTH_HINT}"
        ) from error
    return health


def bounded_get(url: str, headers: dict[str, str], timeout: float, verify: bool | str, host: str,
                doing: str) -> tuple[Any, bytes]:
    """GET ``url`` once (no retries, no redirects): connecting, the headers and the whole body within
    ``timeout`` seconds, the body at most :data:`SMALL_BODY_BYTES`; the response and its body."""
    http = pool_manager(verify)

    def too_large(limit: int) -> DeployError:
        return DeployError(f"{url} answered with more than {limit // 1024} KiB while {doing}, more than any "
                           f"Kubeflow Pipelines answer there holds: {host} is not a KFP API (or a proxy in front of "
                           f"it misbehaves). Pass the KFP UI or API URL as --host. {PORT_FORWARD_HINT}")

    try:
        with deadline(timeout, lambda: _unreachable(host, f"no answer in time: the whole answer did not arrive within "
                                                          f"{timeout:g} s while {doing}; the server is slow or never "
                                                          "ends its answer")):
            response = http.request("GET", url, headers=headers, retries=False, redirect=False, preload_content=False,
                                    timeout=urllib3.Timeout(connect=timeout, read=timeout))
            return response, read_capped(response, SMALL_BODY_BYTES, too_large)
    except urllib3.exceptions.HTTPError as error:
        raise _unreachable(host, _connection_reason(error)) from error
    finally:
        http.clear()


#: The default of deploy's --api-timeout (pipeline/kubeflow/deploy_settings.py): seconds per KFP API call.
API_TIMEOUT_S = 300.0


@contextlib.contextmanager
def api_errors(host: str, doing: str, api_timeout: float = API_TIMEOUT_S) -> Iterator[None]:
    """Turn kfp/kfp_server_api/urllib3 failures into one DeployError paragraph; the call ends within
    ``api_timeout`` seconds whatever the server does (pipeline/kubeflow/http_limits.py)."""
    def expired() -> DeployError:
        return DeployError(
            f"Kubeflow Pipelines at {host} accepted the connection but did not answer in time while {doing} (its "
            f"whole answer did not arrive within {api_timeout:g} s: the server is slow or stuck). Check the API "
            "server with `kubectl -n kubeflow get pods` and its logs, then deploy again, or give it longer with "
            f"--api-timeout SECONDS (now {api_timeout:g}).")

    try:
        with contextlib.redirect_stdout(io.StringIO()), deadline(api_timeout, expired):  # kfp prints links
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
                "restarting: check `kubectl -n kubeflow get pods`, then deploy again (or give it longer with "
                f"--api-timeout SECONDS, now {api_timeout:g}).") from error
        raise _unreachable(host, f"while {doing}: {_connection_reason(error)}") from error
    except (TimeoutError, ConnectionError) as error:
        raise _unreachable(host, f"while {doing}: {error}") from error
    except ValueError as error:  # kfp's own checks, e.g. two pipelines with the same name
        hint = ("Rename or delete the duplicate in the KFP UI, or pass another --pipeline-name."
                if str(error).startswith("Multiple") else
                "Check that --host points at a KFP 2.x API and the package is a valid PipelineSpec.")
        raise DeployError(f"Cannot deploy to {host} while {doing}: {error}. {hint}") from error


def bound_client_io(client: Any, connect_timeout: float, read_timeout: float, host: str) -> None:
    """Timeouts, few retries and a cap on each answer's body for the kfp client's HTTP calls
    (stackenv/compat.py: KFP_REST_CLIENT; the cap: pipeline/kubeflow/http_limits.py)."""
    def too_large(limit: int) -> DeployError:
        return DeployError(f"{host} answered a Kubeflow Pipelines API call with more than {limit >> 20} MiB, more than "
                           "any KFP answer holds: the server (or a proxy in front of it) sends a body without end. "
                           f"Check that --host is the KFP UI or API URL and what answers there. {PORT_FORWARD_HINT}")

    bound_kfp_client_io(client, connect_timeout, read_timeout,
                        read_body=lambda response: read_capped(response, API_BODY_BYTES, too_large))

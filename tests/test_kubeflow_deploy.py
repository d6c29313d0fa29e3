"""``pipeline.kubeflow.deploy`` against a fake KFP v2 REST API on 127.0.0.1.

The fake speaks the endpoints kfp 2.5.0 / kfp_server_api 2.0.5 call, records every request
(multipart uploads decoded), and can answer with errors, so the tests check what the real
client sends over the wire, not calls on a mock object. Uploads are validated as the KFP
2.3.0 API server does (backend src/apiserver/template/v2_template.go NewV2SpecTemplate:
schemaVersion exactly 2.1.0, a pipeline name, a root component), and a run without
``runtime_config.pipeline_root`` gets the backend's default root, minio://mlpipeline/v2/artifacts
(src/v2/driver/driver.go RootDAG), recorded as ``effective_root``.

Multi-user Kubeflow's front doors (``front_door``), as a request meets them before the API:
- "token": the API server's TokenReview authenticator (backend src/apiserver/auth): a bearer
  token it knows is a user, anything else HTTP 401 Unauthenticated (gRPC code 16);
- "dex": oidc-authservice in front of Dex (kubeflow/manifests common/oidc-client, common/dex): a
  request without a valid ``authservice_session`` cookie is redirected (302) to
  ``/dex/auth?...``; Dex with one connector sends it on to ``/dex/auth/local``, then to the
  password form ``/dex/auth/local/login?back=&state=REQ``, whose POST (``login``/``password``)
  either shows the form again ("Invalid Email Address and password.") or redirects (303) through
  ``/dex/approval`` (skipApprovalScreen) to the front door's callback ``/login/oidc?code&state``,
  which sets the session cookie and redirects to ``/``;
- "iap": Google IAP: a bearer OpenID identity token whose ``aud`` is the IAP client id, else 401
  "Invalid IAP credentials"; the identity tokens come from ``/token``, a Google OAuth token
  endpoint for a service-account key (the JWT-bearer grant google-auth's IDTokenCredentials uses:
  an assertion signed by the key, answered with ``{"id_token": ...}``).
With ``multi_user`` the API authorizes each namespaced call for the caller as its
SubjectAccessReview does (resource_manager.go IsAuthorized): a namespace where ``profiles`` gives
the user no role is HTTP 403 "PermissionDenied: User '...' is not authorized" (gRPC code 7).
``dashboard`` serves the Kubeflow dashboard's ``/api/workgroup/env-info`` (the caller's profiles
and roles); ``tag_name`` is the backend version healthz reports.
"""
import contextlib
import json
import re
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import stackenv  # noqa: F401  (before TFX, which the package fixture imports)
from stackenv.errors import ProjectError

import kfp
import pytest
import yaml

from pipeline.kubeflow.deploy import DeployError, deploy

API = "/apis/v2beta1"
PACKAGE_ROOT = "gs://bucket/tfx"
PORT_FORWARD = "kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80"


@dataclass
class Recorded:
    """One request as the server saw it."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-case names
    body: bytes
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    form: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class FakeKfp:
    """State of the fake server; tests read ``requests`` and set ``fail``/``delay`` by route."""

    url: str = ""
    multi_user: bool = False
    requests: list[Recorded] = field(default_factory=list)
    pipelines: dict[str, dict] = field(default_factory=dict)
    versions: dict[str, list[dict]] = field(default_factory=dict)
    experiments: list[dict] = field(default_factory=list)
    runs: list[dict] = field(default_factory=list)
    recurring_runs: list[dict] = field(default_factory=list)
    # What GET /runs/{id} answers, one entry per poll (the last one repeats): (run state, {task: state}).
    run_states: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    fail: dict[str, tuple[int, Any, dict[str, str]]] = field(default_factory=dict)  # route or "*"
    delay: dict[str, float] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    front_door: str = "none"                                       # "token", "dex", "iap"
    tokens: dict[str, str] = field(default_factory=dict)           # bearer token -> user
    dex_users: dict[str, str] = field(default_factory=dict)        # email -> password
    sessions: dict[str, str] = field(default_factory=dict)         # session cookie value -> user
    cookie_name: str = "authservice_session"
    iap_client_id: str = ""
    dashboard: bool = False
    profiles: dict[str, dict[str, str]] = field(default_factory=dict)  # user -> {namespace: role}
    tag_name: str = "2.0.5"

    def sent(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == API + path]


def _parse_multipart(content_type: str, body: bytes) -> tuple[dict, dict]:
    """Exact bytes of each part (the email parser may rewrite line endings)."""
    boundary = re.search(r'boundary="?([^";]+)"?', content_type).group(1).encode()
    files, form = {}, {}
    for chunk in body.split(b"--" + boundary)[1:-1]:
        head, _, data = chunk[2:].partition(b"\r\n\r\n")
        data = data[:-2]  # the CRLF before the next boundary
        disposition = head.decode()
        name = re.search(r'name="([^"]*)"', disposition).group(1)
        filename = re.search(r'filename="([^"]*)"', disposition)
        if filename:
            files[name] = (filename.group(1), data)
        else:
            form[name] = data.decode()
    return files, form


def _route(method: str, path: str) -> str:
    routes = {
        ("GET", f"{API}/healthz"): "healthz",
        ("GET", f"{API}/pipelines"): "list_pipelines",
        ("POST", f"{API}/pipelines/upload"): "upload",
        ("POST", f"{API}/pipelines/upload_version"): "upload_version",
        ("GET", f"{API}/experiments"): "list_experiments",
        ("POST", f"{API}/experiments"): "create_experiment",
        ("POST", f"{API}/runs"): "create_run",
        ("POST", f"{API}/recurringruns"): "create_recurring_run",
        ("GET", f"{API}/recurringruns"): "list_recurring_runs",
    }
    if path.startswith("/dex/") or path in ("/login/oidc", "/token", "/"):
        return "front_door"
    if method == "GET" and path == "/api/workgroup/env-info":
        return "env_info"
    if method == "DELETE" and re.fullmatch(f"{API}/recurringruns/[^/]+", path):
        return "delete_recurring_run"
    if method == "GET" and re.fullmatch(f"{API}/pipelines/[^/]+/versions", path):
        return "list_versions"
    if method == "GET" and re.fullmatch(f"{API}/runs/[^/]+", path):
        return "get_run"
    return routes.get((method, path), "unknown")


def _display_name_filter(query: dict) -> str | None:
    """The name a kfp ``EQUALS display_name`` filter asks for."""
    if "filter" not in query:
        return None
    predicates = json.loads(query["filter"][0])["predicates"]
    assert predicates[0]["key"] == "display_name" and predicates[0]["operation"] in (1, "EQUALS")
    return predicates[0]["stringValue"]


class _Handler(BaseHTTPRequestHandler):
    fake: FakeKfp
    timeout = 5  # a stuck client cannot pin a server thread

    def log_message(self, *args: Any) -> None:  # keep pytest output clean
        pass

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_DELETE(self) -> None:
        self._handle("DELETE")

    def _reply(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        headers = dict(headers or {})
        self.send_response(status)
        self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)

    def _handle(self, method: str) -> None:
        split = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        record = Recorded(method, split.path, parse_qs(split.query, keep_blank_values=True),
                          {k.lower(): v for k, v in self.headers.items()}, body)
        if self.headers.get("Content-Type", "").startswith("multipart/form-data"):
            record.files, record.form = _parse_multipart(self.headers["Content-Type"], body)
        fake = self.fake
        route = _route(method, split.path)
        with fake.lock:
            fake.requests.append(record)
            failure = fake.fail.get(route) or fake.fail.get("*")
            delay = fake.delay.get(route, 0.0)
        if delay:
            time.sleep(delay)
        if failure:
            status, payload, headers = failure
            return self._reply(status, payload, headers)
        if route == "front_door":
            return self._reply(*self._front_door(record))
        user, refusal = self._authenticate(record)
        if refusal:
            return self._reply(*refusal)
        denied = self._authorize(record, route, user)
        if denied:
            return self._reply(*denied)
        with fake.lock:
            status, payload = getattr(self, f"_{route}")(record, user) if route == "env_info" else \
                getattr(self, f"_{route}")(record)
        self._reply(status, payload)

    # -- front doors and multi-user authorization ----------------------------------------------
    def _authenticate(self, record: Recorded) -> tuple[str | None, tuple | None]:
        fake, bearer = self.fake, record.headers.get("authorization", "").removeprefix("Bearer ")
        if fake.front_door == "token":
            if bearer in fake.tokens:
                return fake.tokens[bearer], None
            return None, (401, {"error": "Unauthenticated", "code": 16, "message": "Request header error: there is "
                                "no user identity header.: Failed to authenticate token review"}, {})
        if fake.front_door == "iap":
            claims = _jwt_claims(bearer)
            if claims.get("aud") == fake.iap_client_id and claims.get("email"):
                return claims["email"], None
            problem = "JWT audience doesn't match this application" if claims else "Unable to parse JWT"
            return None, (401, f"Invalid IAP credentials: {problem}".encode(), {"Content-Type": "text/html"})
        if fake.front_door == "dex":
            cookies = dict(part.strip().split("=", 1) for part in record.headers.get("cookie", "").split(";")
                           if "=" in part)
            user = fake.sessions.get(cookies.get(fake.cookie_name, ""))
            if user:
                return user, None
            return None, (302, b"", {"Location": "/dex/auth?client_id=kubeflow-oidc-authservice&redirect_uri="
                                                 "%2Flogin%2Foidc&response_type=code&scope=openid+profile+email+groups"
                                                 "&state=st4te", "Content-Type": "text/html"})
        return None, None

    def _authorize(self, record: Recorded, route: str, user: str | None) -> tuple | None:
        fake = self.fake
        if fake.front_door == "none" or not fake.multi_user or route not in ("list_experiments",
                                                                              "create_experiment"):
            return None
        namespace = (record.query.get("namespace", [""])[0] if route == "list_experiments"
                     else record.json().get("namespace", ""))
        if namespace in fake.profiles.get(user or "", {}):
            return None
        verb = "list" if route == "list_experiments" else "create"
        message = (f"Failed to {verb} experiments due to authorization error. Check if you have permission to "
                   f"access namespace {namespace}: PermissionDenied: User '{user}' is not authorized with reason:  "
                   f"(request: &ResourceAttributes{{Namespace:{namespace},Verb:{verb},Group:pipelines.kubeflow.org,"
                   "Version:v1beta1,Resource:experiments,Subresource:,Name:,}): Unauthorized access")
        return 403, {"error": message, "code": 7, "message": message}, {}

    def _env_info(self, record: Recorded, user: str | None) -> tuple[int, Any]:
        if not self.fake.dashboard:
            return 404, {"error": "Not Found", "code": 5, "message": "no route"}
        namespaces = [{"user": user, "namespace": ns, "role": role}
                      for ns, role in sorted(self.fake.profiles.get(user or "", {}).items())]
        return 200, {"user": user, "platform": {"kubeflowVersion": "1.7.0", "provider": "other"},
                     "namespaces": namespaces, "isClusterAdmin": False}

    def _front_door(self, record: Recorded) -> tuple:
        fake, path, html = self.fake, record.path, {"Content-Type": "text/html"}
        form = ('<html><body><form method="post" action="/dex/auth/local/login?back=&amp;state=req1">'
                '<input name="login"><input name="password" type="password"></form>{}</body></html>')
        if path == "/":
            user, refusal = self._authenticate(record)
            return refusal or (200, b"<html>Kubeflow Central Dashboard</html>", html)
        if path == "/dex/auth":
            return 302, b"", {**html, "Location": "/dex/auth/local?req=req1"}
        if path == "/dex/auth/local":
            return 302, b"", {**html, "Location": "/dex/auth/local/login?back=&state=req1"}
        if path == "/dex/auth/local/login" and record.method == "GET":
            return 200, form.format("").encode(), html
        if path == "/dex/auth/local/login":
            fields = parse_qs(record.body.decode())
            login, password = fields.get("login", [""])[0], fields.get("password", [""])[0]
            if fake.dex_users.get(login) != password or not login:
                return 200, form.format("Invalid Email Address and password.").encode(), html
            fake.sessions.setdefault("pending:req1", login)
            return 303, b"", {**html, "Location": "/dex/approval?req=req1&hmac=x"}
        if path == "/dex/approval":
            return 303, b"", {**html, "Location": "/login/oidc?code=c0de&state=st4te"}
        if path == "/login/oidc":
            user = fake.sessions.pop("pending:req1", None)
            if not user or record.query.get("code") != ["c0de"]:
                return 401, b"invalid code", html
            session = uuid.uuid4().hex
            fake.sessions[session] = user
            return 302, b"", {**html, "Location": "/", "Set-Cookie": f"{fake.cookie_name}={session}; Path=/; HttpOnly"}
        if path == "/token" and record.method == "POST":
            return self._google_token(record)
        return 404, b"not found", html

    def _google_token(self, record: Recorded) -> tuple:
        """Google's OAuth token endpoint for a JWT-bearer grant with a target_audience: an identity token."""
        fields = parse_qs(record.body.decode())
        claims = _jwt_claims(fields.get("assertion", [""])[0])
        if fields.get("grant_type") != ["urn:ietf:params:oauth:grant-type:jwt-bearer"] or not claims:
            return 400, {"error": "invalid_grant"}, {}
        now = int(time.time())
        token = _jwt({"aud": claims.get("target_audience"), "email": claims.get("iss"), "iat": now,
                      "exp": now + 3600, "iss": "https://accounts.google.com"})
        return 200, {"id_token": token}, {}

    def _unknown(self, record: Recorded) -> tuple[int, dict]:
        return 404, {"error": "Not Found", "code": 5, "message": f"no route for {record.path}"}

    def _healthz(self, record: Recorded) -> tuple[int, dict]:
        return 200, {"commit_sha": "fake", "tag_name": self.fake.tag_name, "multi_user": self.fake.multi_user}

    def _list_pipelines(self, record: Recorded) -> tuple[int, dict]:
        name = _display_name_filter(record.query)
        found = [p for p in self.fake.pipelines.values() if name is None or p["display_name"] == name]
        return 200, ({"pipelines": found, "total_size": len(found)} if found else {})

    def _add_version(self, pipeline_id: str, name: str) -> dict:
        version = {"pipeline_id": pipeline_id, "pipeline_version_id": str(uuid.uuid4()),
                   "display_name": name, "created_at": "2024-05-01T12:00:00Z"}
        self.fake.versions[pipeline_id].insert(0, version)  # newest first, like created_at desc
        return version

    def _invalid_spec(self, record: Recorded) -> str | None:
        """NewV2SpecTemplate's checks, with its messages (HTTP 400 InvalidInputError)."""
        _, content = record.files["uploadfile"]
        specs = [d for d in yaml.safe_load_all(content) if isinstance(d, dict) and "pipelineInfo" in d]
        if len(specs) != 1:
            return "no pipeline spec is provided" if not specs else "multiple pipeline specs provided"
        spec = specs[0]
        if spec.get("schemaVersion") != "2.1.0":
            return ("KFP only supports schema version 2.1.0, but the pipeline spec has version "
                    f"{spec.get('schemaVersion')}")
        if not (spec.get("pipelineInfo") or {}).get("name"):
            return "invalid v2 pipeline spec: name is empty"
        if not spec.get("root"):
            return "invalid v2 pipeline spec: root component is empty"
        return None

    def _upload(self, record: Recorded) -> tuple[int, dict]:
        invalid = self._invalid_spec(record)
        if invalid:
            return 400, {"error_message": f"Failed to create a pipeline: {invalid}", "code": 3}
        name = record.query["name"][0]
        if any(p["display_name"] == name for p in self.fake.pipelines.values()):
            return 409, {"error_message": f"pipeline {name} already exists", "error_details": "exists"}
        pipeline = {"pipeline_id": str(uuid.uuid4()), "display_name": name,
                    "created_at": "2024-05-01T12:00:00Z"}
        self.fake.pipelines[pipeline["pipeline_id"]] = pipeline
        self.fake.versions[pipeline["pipeline_id"]] = []
        self._add_version(pipeline["pipeline_id"], name)
        return 200, pipeline

    def _upload_version(self, record: Recorded) -> tuple[int, dict]:
        pipeline_id = record.query["pipelineid"][0]
        if pipeline_id not in self.fake.pipelines:
            return 404, {"error_message": f"pipeline {pipeline_id} not found"}
        invalid = self._invalid_spec(record)
        if invalid:
            return 400, {"error_message": f"Failed to create a pipeline version: {invalid}", "code": 3}
        return 200, self._add_version(pipeline_id, record.query["name"][0])

    def _list_versions(self, record: Recorded) -> tuple[int, dict]:
        pipeline_id = record.path.split("/")[-2]
        found = self.fake.versions.get(pipeline_id, [])
        return 200, {"pipeline_versions": found, "total_size": len(found)}

    def _list_experiments(self, record: Recorded) -> tuple[int, dict]:
        name = _display_name_filter(record.query)
        namespace = record.query.get("namespace", [""])[0]
        found = [e for e in self.fake.experiments
                 if e["display_name"] == name and e.get("namespace", "") == namespace]
        return 200, ({"experiments": found, "total_size": len(found)} if found else {})

    def _create_experiment(self, record: Recorded) -> tuple[int, dict]:
        experiment = dict(record.json(), experiment_id=str(uuid.uuid4()))
        self.fake.experiments.append(experiment)
        return 200, experiment

    def _get_run(self, record: Recorded) -> tuple[int, dict]:
        run_id = record.path.split("/")[-1]
        run = next((r for r in self.fake.runs if r["run_id"] == run_id), None)
        if run is None:
            return 404, {"error_message": f"run {run_id} not found", "code": 5}
        polls = len(self.fake.sent("GET", f"/runs/{run_id}"))
        state, tasks = self.fake.run_states[min(polls, len(self.fake.run_states)) - 1]
        details = [{"display_name": name, "state": task_state, "task_id": name,
                    "pod_name": f"{name.lower()}-pod-{run_id[:5]}",
                    **({"error": {"message": f"{name} exited with code 1"}} if task_state == "FAILED" else {})}
                   for name, task_state in tasks.items()]
        return 200, dict(run, state=state, run_details={"task_details": details})

    def _create_run(self, record: Recorded) -> tuple[int, dict]:
        run = dict(record.json(), run_id=str(uuid.uuid4()), created_at="2024-05-01T12:00:00Z")
        run["effective_root"] = ((run.get("runtime_config") or {}).get("pipeline_root")
                                 or "minio://mlpipeline/v2/artifacts")
        self.fake.runs.append(run)
        return 200, run


    def _create_recurring_run(self, record: Recorded) -> tuple[int, dict]:
        """What toModelJob (backend src/apiserver/server/api_converter.go) checks, with its messages."""
        body = record.json()
        concurrency = int(body.get("max_concurrency") or 0)
        if not 1 <= concurrency <= 10:
            return 400, {"error_message": "Max concurrency of a recurring run must be at least 1 and at most 10. "
                                          f"Received {concurrency}", "code": 3}
        cron = ((body.get("trigger") or {}).get("cron_schedule") or {}).get("cron")
        if cron is not None and not _robfig_v1_parses(cron):
            return 400, {"error_message": "Schedule cron is not a supported format(https://godoc.org/github.com/"
                                          f"robfig/cron). Error: {cron}", "code": 3}
        reference = body.get("pipeline_version_reference") or {}
        if reference.get("pipeline_id") not in self.fake.pipelines:
            return 404, {"error_message": f"pipeline {reference.get('pipeline_id')} not found", "code": 5}
        recurring = dict(body, recurring_run_id=str(uuid.uuid4()), created_at="2024-05-01T12:00:00Z",
                         status="ENABLED" if body.get("mode") == "ENABLE" else "DISABLED")
        self.fake.recurring_runs.insert(0, recurring)
        return 200, recurring

    def _list_recurring_runs(self, record: Recorded) -> tuple[int, dict]:
        found = self.fake.recurring_runs
        return 200, ({"recurringRuns": found, "total_size": len(found)} if found else {})

    def _delete_recurring_run(self, record: Recorded) -> tuple[int, dict]:
        run_id = record.path.split("/")[-1]
        kept = [r for r in self.fake.recurring_runs if r["recurring_run_id"] != run_id]
        if len(kept) == len(self.fake.recurring_runs):
            return 404, {"error_message": f"Job {run_id} not found", "code": 5}
        self.fake.recurring_runs[:] = kept
        return 200, {}


def _jwt_claims(token: str) -> dict:
    """The payload of a JWT (signature not checked: the fake trusts its own issuer), {} if it is none."""
    import base64

    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        return claims if isinstance(claims, dict) else {}
    except (IndexError, ValueError):
        return {}


def _jwt(claims: dict) -> str:
    import base64

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")

    return f"{part({'alg': 'RS256', 'typ': 'JWT'})}.{part(claims)}.c2lnbmF0dXJl"


def _robfig_v1_parses(spec: str) -> bool:
    """robfig/cron v1's ``Parse`` (parser.go): descriptors, or 5-6 fields seconds first (day of week
    optional), each a list of ``*``/``?``/``a``/``a-b`` with ``/step``, names for month and weekday."""
    if spec.startswith("@"):
        return spec in ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly") or \
            bool(re.fullmatch(r"@every (\d+(ns|us|ms|s|m|h))+", spec))
    fields = spec.split()
    if len(fields) not in (5, 6):
        return False
    bounds = [(0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (0, 6)]
    names = {4: "JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC".split(), 5: "SUN MON TUE WED THU FRI SAT".split()}

    def value(text: str, index: int) -> int | None:
        if text.upper() in names.get(index, []):
            return names[index].index(text.upper()) + bounds[index][0]
        return int(text) if text.isdigit() else None

    for index, field_ in enumerate(fields):
        low, high = bounds[index]
        for part in field_.split(","):
            span, _, step = part.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                return False
            if span in ("*", "?"):
                continue
            ends = [value(v, index) for v in span.split("-")]
            if len(ends) > 2 or None in ends or not low <= ends[0] <= ends[-1] <= high:
                return False
    return True


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and hung up is expected in the timeout test


@contextlib.contextmanager
def _serving(fake: FakeKfp, tls: tuple[Path, Path] | None = None) -> Iterator[FakeKfp]:
    """Serve ``fake`` on an ephemeral port (HTTPS with ``tls`` = (certificate, key)); a watchdog stops it."""
    server = _QuietServer(("127.0.0.1", 0), type("Handler", (_Handler,), {"fake": fake}))
    scheme = "http"
    if tls:
        import ssl

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = context.wrap_socket(server.socket, server_side=True)
        scheme = "https"
    fake.url = f"{scheme}://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    watchdog = threading.Timer(120, server.shutdown)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield fake
    finally:
        watchdog.cancel()
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def kfp_server() -> Iterator[FakeKfp]:
    """A fake KFP API on an ephemeral port; a watchdog stops it if teardown never comes."""
    with _serving(FakeKfp()) as fake:
        yield fake


@pytest.fixture(autouse=True)
def _isolated_kfp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ~/.config/kfp/context.json or KFP env vars of the machine leak into a test."""
    monkeypatch.setattr(kfp.Client, "_LOCAL_KFP_CONTEXT", str(tmp_path / "kfp-context.json"))
    for name in ("KF_PIPELINES_SA_TOKEN_PATH", "KF_PIPELINES_UI_ENDPOINT", "KF_PIPELINES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real package: what TFX's KubeflowV2DagRunner writes for a one-component pipeline, with
    the pipeline root recorded as `python -m pipeline compile` records it."""
    from tfx import v1 as tfx
    from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner as v2

    out = tmp_path_factory.mktemp("kfp-package")
    pipeline = tfx.dsl.Pipeline(pipeline_name="deploy-test", pipeline_root="/tmp/root",
                                components=[tfx.components.ImportExampleGen(input_base="/tmp/x")])
    v2.KubeflowV2DagRunner(
        config=v2.KubeflowV2DagRunnerConfig(default_image="example/image:1", use_pipeline_spec_2_1=True),
        output_dir=str(out), output_filename="p.yaml").run(pipeline)
    path = out / "p.yaml"
    path.write_text(path.read_text() + f"defaultPipelineRoot: {PACKAGE_ROOT}\n")
    return path


def _deploy_error(*args: Any, **kwargs: Any) -> str:
    with pytest.raises(DeployError) as caught:
        deploy(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message and "Traceback" not in message
    return message


# --------------------------------------------------------------------------- success paths


def test_first_deploy_creates_pipeline_with_exact_package(kfp_server: FakeKfp, package: Path) -> None:
    result = deploy(kfp_server.url, str(package))

    assert result.created_pipeline and result.run_id is None
    [lookup] = kfp_server.sent("GET", "/pipelines")
    assert _display_name_filter(lookup.query) == "deploy-test"  # name from pipelineInfo.name
    [upload] = kfp_server.sent("POST", "/pipelines/upload")
    assert upload.query["name"] == ["deploy-test"]
    assert upload.files["uploadfile"] == ("p.yaml", package.read_bytes())
    assert not kfp_server.sent("POST", "/pipelines/upload_version")
    [pipeline] = kfp_server.pipelines.values()
    assert result.pipeline_id == pipeline["pipeline_id"]
    assert result.version_id == kfp_server.versions[pipeline["pipeline_id"]][0]["pipeline_version_id"]
    assert result.pipeline_url == (f"{kfp_server.url}/#/pipelines/details/{result.pipeline_id}"
                                   f"/version/{result.version_id}")
    assert not kfp_server.sent("POST", "/runs") and not kfp_server.sent("POST", "/experiments")
    assert result.summary().startswith(f"Created pipeline 'deploy-test' (id {result.pipeline_id})")


def test_second_deploy_adds_version_to_existing_pipeline(kfp_server: FakeKfp, package: Path) -> None:
    first = deploy(kfp_server.url, str(package), pipeline_name="my pipeline")
    second = deploy(kfp_server.url, str(package), pipeline_name="my pipeline")

    assert not second.created_pipeline
    assert second.pipeline_id == first.pipeline_id and second.version_id != first.version_id
    assert len(kfp_server.sent("POST", "/pipelines/upload")) == 1 and len(kfp_server.pipelines) == 1
    [version_upload] = kfp_server.sent("POST", "/pipelines/upload_version")
    assert version_upload.query["pipelineid"] == [first.pipeline_id]
    assert re.fullmatch(r"my pipeline-\d{8}-\d{6}", version_upload.query["name"][0])
    assert version_upload.files["uploadfile"] == ("p.yaml", package.read_bytes())
    assert second.version_id == kfp_server.versions[first.pipeline_id][0]["pipeline_version_id"]


def test_run_uses_experiment_in_namespace_and_exact_version(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.multi_user = True
    client_kwargs = []

    def client_factory(**kwargs: Any) -> kfp.Client:
        client_kwargs.append(kwargs)
        return kfp.Client(**kwargs)

    first = deploy(kfp_server.url, str(package), run=True, namespace="team-a", experiment="nightly",
                   run_name="first run", client_factory=client_factory, pipeline_root="gs://bucket/root")
    second = deploy(kfp_server.url, str(package), run=True, namespace="team-a", experiment="nightly")

    assert client_kwargs == [{"host": kfp_server.url, "namespace": "team-a"}]

    [created] = kfp_server.sent("POST", "/experiments")  # the second deploy finds it
    assert created.json() == {"display_name": "nightly", "namespace": "team-a"}
    lookups = [r for r in kfp_server.sent("GET", "/experiments") if "filter" in r.query]
    assert [(r.query["namespace"], _display_name_filter(r.query)) for r in lookups] == [
        (["team-a"], "nightly")] * 2
    experiment_id = kfp_server.experiments[0]["experiment_id"]
    assert first.experiment_id == second.experiment_id == experiment_id
    runs = [r.json() for r in kfp_server.sent("POST", "/runs")]
    for run, result in zip(runs, (first, second)):
        assert run["experiment_id"] == experiment_id
        assert run["pipeline_version_reference"] == {"pipeline_id": result.pipeline_id,
                                                     "pipeline_version_id": result.version_id}
        assert "pipeline_spec" not in run  # runs the uploaded version, not an inline copy
    assert runs[0]["display_name"] == "first run"
    assert runs[0]["runtime_config"]["pipeline_root"] == "gs://bucket/root"
    assert runs[1]["runtime_config"]["pipeline_root"] == PACKAGE_ROOT  # the package's own root
    assert first.version_id != second.version_id
    assert [first.run_id, second.run_id] == [r["run_id"] for r in kfp_server.runs]
    assert second.run_url == f"{kfp_server.url}/#/runs/details/{second.run_id}"


def test_token_from_env_file_is_sent(kfp_server: FakeKfp, package: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("s3cret\n")
    monkeypatch.setenv("KF_PIPELINES_SA_TOKEN_PATH", str(token_file))
    deploy(kfp_server.url, str(package))
    assert kfp_server.requests
    assert {r.headers.get("authorization") for r in kfp_server.requests} == {"Bearer s3cret"}


def test_json_named_spec_is_uploaded_under_yaml_name(kfp_server: FakeKfp, package: Path,
                                                     tmp_path: Path) -> None:
    """KFP servers pick the parser by file name and reject .json up to 2.0; JSON is YAML."""
    import yaml

    spec_json = tmp_path / "spec.json"
    spec_json.write_text(json.dumps(yaml.safe_load(package.read_text())))
    deploy(kfp_server.url, str(spec_json))
    [upload] = kfp_server.sent("POST", "/pipelines/upload")
    assert upload.files["uploadfile"] == ("spec.yaml", spec_json.read_bytes())


# --------------------------------------------------------------------------- package errors


def test_missing_package(kfp_server: FakeKfp, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    message = _deploy_error(kfp_server.url, str(missing))
    assert str(missing) in message and "does not exist" in message and "KubeflowV2DagRunner" in message
    assert not kfp_server.requests


@pytest.mark.parametrize("name, content, expected", [
    ("broken.yaml", "a: [unclosed", "is not a YAML file"),
    ("values.yaml", "name: x\nimage: y\n", "missing top-level pipelineInfo, root, deploymentSpec"),
    ("job.json", json.dumps({"displayName": "x", "pipelineSpec": {"pipelineInfo": {"name": "x"}}}),
     "Vertex AI PipelineJob"),
    ("workflow.yaml", "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nspec: {}\n", "KFP v1 Argo Workflow"),
    ("image.yaml", b"\x89PNG\r\n\x1a\n\x00\xff", "is not a YAML file"),
    ("list.yaml", "- a\n- b\n", "is not a KFP v2 PipelineSpec"),
])
def test_not_a_pipeline_spec(kfp_server: FakeKfp, tmp_path: Path, name: str, content: Any,
                             expected: str) -> None:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    message = _deploy_error(kfp_server.url, str(path))
    assert str(path) in message and expected in message and "output_filename" in message
    assert not kfp_server.requests


# --------------------------------------------------------------------------- connection errors


def test_closed_port_fails_fast_with_port_forward_hint(package: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{probe.getsockname()[1]}"
    started = time.monotonic()
    message = _deploy_error(host, str(package))
    assert time.monotonic() - started < 15
    assert host in message and "connection refused" in message
    assert PORT_FORWARD in message and "--host http://localhost:8080" in message


def test_silent_server_times_out(package: Path) -> None:
    """Accepts TCP connections (kernel backlog) but never answers."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        message = _deploy_error(host, str(package), timeout=1)
        assert time.monotonic() - started < 10
    assert host in message and "no answer in time" in message and PORT_FORWARD in message


def test_stalled_upload_is_bounded_and_not_resent(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.delay["upload"] = 3  # answered after 3 s: only the 1-s api_timeout makes it an error
    message = _deploy_error(kfp_server.url, str(package), api_timeout=1)
    assert "did not answer in time while uploading" in message and kfp_server.url in message
    assert len(kfp_server.sent("POST", "/pipelines/upload")) == 1  # a POST is never retried


# --------------------------------------------------------------------------- server errors


@pytest.mark.parametrize("status, route", [(401, "*"), (403, "*"), (401, "upload"),
                                           (403, "create_experiment")])
def test_auth_failures_explain_how_to_authenticate(kfp_server: FakeKfp, package: Path, status: int,
                                                   route: str) -> None:
    text = "Unauthenticated" if status == 401 else "user bob is not allowed in namespace team-a"
    kfp_server.fail[route] = (status, {"error": text, "code": 16, "message": text}, {})
    message = _deploy_error(kfp_server.url, str(package), run=True, namespace="team-a")
    assert f"HTTP {status}" in message and text in message and kfp_server.url in message
    for hint in ("KF_PIPELINES_SA_TOKEN_PATH", "existing_token", "--namespace"):
        assert hint in message
    assert not kfp_server.sent("POST", "/runs")


def test_login_redirect_is_reported_as_auth(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.fail["*"] = (302, b"", {"Location": "/dex/auth?client_id=kubeflow-oidc-authservice"})
    message = _deploy_error(kfp_server.url, str(package))
    assert "HTTP 302" in message and "/dex/auth" in message and "KF_PIPELINES_SA_TOKEN_PATH" in message


def test_server_error_reports_status_and_message(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.fail["list_pipelines"] = (500, {"error": "x", "code": 13,
                                               "message": "database is locked (mysql)"}, {})
    message = _deploy_error(kfp_server.url, str(package))
    assert "HTTP 500" in message and "database is locked (mysql)" in message
    assert "looking up pipeline 'deploy-test'" in message
    assert not kfp_server.sent("POST", "/pipelines/upload")


def test_not_a_kfp_v2_api(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.fail["healthz"] = (404, b"404 page not found", {})
    message = _deploy_error(kfp_server.url, str(package))
    assert "HTTP 404" in message and "v2 API" in message and PORT_FORWARD in message


def test_multi_user_run_needs_namespace(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.multi_user = True
    message = _deploy_error(kfp_server.url, str(package), run=True)
    assert "multi-user" in message and "--namespace" in message
    assert not [r for r in kfp_server.requests if r.method == "POST"]


# --------------------------------------------------------------------------- pipeline root


@pytest.mark.parametrize("root, expected", [
    ("minio://mlpipeline/v2/artifacts", "on another store than the one"),
    ("/mnt/data/root", "local path"),
    ("hdfs://nn/root", "hdfs://"),
])
def test_unwritable_root_is_refused_before_upload(kfp_server: FakeKfp, package: Path, root: str,
                                                  expected: str) -> None:
    message = _deploy_error(kfp_server.url, str(package), run=True, pipeline_root=root)
    assert root in message and expected in message and "gs://" in message
    assert not kfp_server.requests  # nothing reached the server


def test_package_without_root_is_refused(kfp_server: FakeKfp, package: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.yaml"
    bare.write_text(package.read_text().replace(f"defaultPipelineRoot: {PACKAGE_ROOT}\n", ""))
    message = _deploy_error(kfp_server.url, str(bare), run=True)
    assert "records no pipeline root" in message and "minio://mlpipeline/v2/artifacts" in message
    assert "--pipeline-root" in message and not kfp_server.requests
    result = deploy(kfp_server.url, str(bare), run=True, pipeline_root="gs://other/root")
    assert kfp_server.runs[0]["effective_root"] == "gs://other/root" and result.run_id


def test_fake_server_rejects_what_kfp_rejects(kfp_server: FakeKfp, package: Path, tmp_path: Path) -> None:
    """The emulation is no kinder than the server: a 2.0.0 spec is refused with the server's words."""
    old = tmp_path / "old.yaml"
    old.write_text(package.read_text().replace("schemaVersion: 2.1.0", "schemaVersion: 2.0.0"))
    import kfp_server_api  # noqa: PLC0415

    client = kfp.Client(host=kfp_server.url)
    with pytest.raises(kfp_server_api.ApiException) as caught:
        client.upload_pipeline(str(old), pipeline_name="old")
    assert caught.value.status == 400 and "only supports schema version 2.1.0" in str(caught.value.body)
    message = _deploy_error(kfp_server.url, str(old))
    assert "2.0.0" in message and "use_pipeline_spec_2_1=True" in message


# --------------------------------------------------------------------------- run options and --wait


def test_caching_off_and_service_account_reach_the_server(kfp_server: FakeKfp, package: Path) -> None:
    """kfp 2.5 ignores run_pipeline(enable_caching=) for an uploaded version: the upload carries it."""
    deploy(kfp_server.url, str(package), run=True, enable_caching=False, service_account="pipeline-runner")
    [upload] = kfp_server.sent("POST", "/pipelines/upload")
    name, content = upload.files["uploadfile"]
    spec = yaml.safe_load(content)
    assert name == "p.yaml" and spec["defaultPipelineRoot"] == PACKAGE_ROOT
    assert {t["cachingOptions"]["enableCache"] for t in spec["root"]["dag"]["tasks"].values()} == {False}
    assert kfp_server.runs[0]["service_account"] == "pipeline-runner"


def test_wait_follows_the_run_to_success(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.run_states = [("RUNNING", {"ImportExampleGen": "RUNNING"}),
                             ("SUCCEEDED", {"ImportExampleGen": "SUCCEEDED"})]
    lines: list[str] = []
    result = deploy(kfp_server.url, str(package), run=True, wait_timeout=30, say=lines.append)
    assert [line.split() for line in lines if line.startswith("  ")] == [
        ["ImportExampleGen", "RUNNING"], ["ImportExampleGen", "SUCCEEDED"]]
    assert lines[-1] == f"Run {result.run_id} succeeded."


def test_wait_on_a_failed_run_names_the_step_and_its_log(kfp_server: FakeKfp, package: Path) -> None:
    kfp_server.run_states = [("FAILED", {"ImportExampleGen": "SUCCEEDED", "StatisticsGen": "FAILED"})]
    # Waited out, the message would be the 30-s timeout's ("had not ended"), not the run's failure.
    message = _deploy_error(kfp_server.url, str(package), run=True, namespace="team-a", wait_timeout=30,
                            say=lambda line: None)
    assert "ended FAILED" in message and "StatisticsGen failed (StatisticsGen exited with code 1)" in message
    assert "kubectl logs -n team-a statisticsgen-pod-" in message and "ImportExampleGen failed" not in message


def test_wait_is_bounded(kfp_server: FakeKfp, package: Path) -> None:
    from pipeline.kubeflow.wait import follow_run  # noqa: PLC0415

    kfp_server.run_states = [("RUNNING", {"Trainer": "RUNNING"})]
    result = deploy(kfp_server.url, str(package), run=True)
    now = [0.0]
    client = kfp.Client(host=kfp_server.url)
    with pytest.raises(DeployError, match="had not ended after 60 s .* still running: Trainer"):
        follow_run(client.get_run, result.run_id, timeout=60, poll=10, say=lambda line: None,
                   clock=lambda: now[0], sleep=lambda seconds: now.__setitem__(0, now[0] + seconds))
    assert now[0] == 60 and len(kfp_server.sent("GET", f"/runs/{result.run_id}")) == 7


def test_cli_wait_on_a_failed_run_exits_non_zero(kfp_server: FakeKfp, package: Path) -> None:
    """`deploy --run --wait` as a user runs it: one paragraph on stderr, exit 2, bounded time."""
    from conftest import run_cli  # noqa: PLC0415

    kfp_server.run_states = [("FAILED", {"ImportExampleGen": "SUCCEEDED", "Trainer": "FAILED"})]
    result = run_cli("deploy", "--host", kfp_server.url, "--package", package, "--run", "--wait",
                     "--wait-timeout", "60", timeout=120)  # bounded: TimeoutExpired, not a speed assertion
    assert result.returncode == 2, result.stderr[-2000:]
    assert "ended FAILED" in result.stderr and "Trainer failed" in result.stderr
    assert "kubectl logs" in result.stderr and "Traceback" not in result.stderr
    assert "  Trainer              FAILED" in result.stdout


# --------------------------------------------------------------------------- recurring runs (continuous training)


def test_schedule_creates_a_recurring_run_of_the_uploaded_version(kfp_server: FakeKfp, package: Path) -> None:
    result = deploy(kfp_server.url, str(package), schedule="0 0 2 * * *", service_account="pipeline-runner")
    assert result.recurring_run_id and result.run_id is None  # scheduled, nothing started now
    [sent] = kfp_server.sent("POST", "/recurringruns")
    body = sent.json()
    # The request shape kfp 2.5.0's create_recurring_run builds (kfp/client/client.py).
    assert body["trigger"] == {"cron_schedule": {"cron": "0 0 2 * * *"}}
    assert body["pipeline_version_reference"] == {"pipeline_id": result.pipeline_id,
                                                  "pipeline_version_id": result.version_id}
    assert body["experiment_id"] == result.experiment_id and body["mode"] == "ENABLE"
    assert body["max_concurrency"] == "1" or body["max_concurrency"] == 1
    assert body["no_catchup"] is True and body["service_account"] == "pipeline-runner"
    assert body["runtime_config"]["pipeline_root"] == PACKAGE_ROOT
    assert f"Scheduled recurring run {result.recurring_run_id} (0 0 2 * * *)" in result.summary()


@pytest.mark.parametrize("cron, expected", [
    ("0 2 * * *", "five fields"),                   # robfig would read it as every hour at minute 2
    ("0 0 25 * * *", "the hour field '25' is outside 0-23"),
    ("0 0 2 * * MON-XYZ", "'XYZ' is not a number"),
    ("every day", "2 fields, not six"),
    ("@fortnightly", "unknown descriptor"),
    ("", "it is empty"),
    ("0 */0 * * * *", "step '0'"),
])
def test_bad_cron_is_refused_before_anything_is_sent(kfp_server: FakeKfp, package: Path, cron: str,
                                                     expected: str) -> None:
    from stackenv.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        deploy(kfp_server.url, str(package), schedule=cron)
    message = str(caught.value)
    assert "--schedule" in message and expected in message and "seconds first" in message, message
    assert "\n" not in message and kfp_server.requests == []


@pytest.mark.parametrize("cron", ["0 0 2 * * *", "0 30 6 * * 1-5", "0 0 */6 * * ?", "@daily", "@every 6h",
                                  "0 0 0 1 JAN,JUL *"])
def test_every_cron_the_cli_accepts_the_api_accepts(cron: str) -> None:
    from pipeline.kubeflow.schedule import check_cron

    assert check_cron(cron) == cron and _robfig_v1_parses(cron)


def test_fake_server_rejects_what_the_recurring_run_api_rejects(kfp_server: FakeKfp, package: Path) -> None:
    from pipeline.kubeflow.deploy import connect

    result = deploy(kfp_server.url, str(package))
    client = connect(kfp_server.url)
    experiment = client.create_experiment("Default").experiment_id
    with pytest.raises(Exception, match="Schedule cron is not a supported format"):
        client.create_recurring_run(experiment, "x", cron_expression="0 0 99 * * *",
                                    pipeline_id=result.pipeline_id, version_id=result.version_id)
    with pytest.raises(Exception, match="Max concurrency"):
        client.create_recurring_run(experiment, "x", cron_expression="0 0 2 * * *", max_concurrency=11,
                                    pipeline_id=result.pipeline_id, version_id=result.version_id)
    assert kfp_server.recurring_runs == []


def test_cli_schedule_list_and_delete(kfp_server: FakeKfp, package: Path, capsys: pytest.CaptureFixture) -> None:
    from pipeline.cli import main

    assert main(["deploy", "--host", kfp_server.url, "--package", str(package), "--schedule", "@daily"]) == 0
    [recurring] = kfp_server.recurring_runs
    assert f"Scheduled recurring run {recurring['recurring_run_id']} (@daily)" in capsys.readouterr().out
    assert main(["deploy", "--host", kfp_server.url, "--list-schedules"]) == 0
    listed = capsys.readouterr().out
    assert recurring["recurring_run_id"] in listed and "@daily" in listed and "ENABLED" in listed
    assert main(["deploy", "--host", kfp_server.url, "--delete-schedule", recurring["recurring_run_id"]]) == 0
    assert kfp_server.recurring_runs == [] and "Deleted recurring run" in capsys.readouterr().out
    assert main(["deploy", "--host", kfp_server.url, "--delete-schedule", "nope"]) != 0
    assert "not found" in capsys.readouterr().err
    assert main(["deploy", "--host", kfp_server.url, "--schedule", "0 2 * * *"]) != 0  # no --package
    assert main(["deploy", "--host", kfp_server.url, "--package", str(package), "--schedule", "0 2 * * *"]) != 0
    assert "five fields" in capsys.readouterr().err


# --------------------------------------------------------------------------- multi-user Kubeflow: login, namespace


USER = "user@example.com"
PROFILE = "kubeflow-user-example-com"


def _multi_user(fake: FakeKfp, front_door: str, dashboard: bool = True) -> FakeKfp:
    fake.multi_user, fake.front_door, fake.dashboard = True, front_door, dashboard
    fake.profiles = {USER: {PROFILE: "owner", "team-shared": "contributor"}}
    return fake


def _cli(*args: Any) -> tuple[int, str, str]:
    """`python -m pipeline deploy ...` in-process: (exit code, stdout, stderr)."""
    import io

    from pipeline.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(["deploy", *map(str, args)])
        except SystemExit as exit_:
            code = exit_.code
    return code, out.getvalue(), err.getvalue()


def test_dex_login_on_the_command_line_runs_in_the_users_own_profile(kfp_server: FakeKfp, package: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    _multi_user(kfp_server, "dex").dex_users = {USER: "12341234"}
    monkeypatch.setenv("KFP_DEX_PASSWORD", "12341234")
    code, out, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--dex-user", USER)
    assert code == 0, err
    [run] = kfp_server.runs
    [experiment] = kfp_server.experiments
    assert experiment["namespace"] == PROFILE and run["experiment_id"] == experiment["experiment_id"]
    [session] = [value for value, user in kfp_server.sessions.items() if user == USER]
    api_calls = [r for r in kfp_server.requests if r.path.startswith(API)]
    assert api_calls and {r.headers.get("cookie") for r in api_calls} == {f"authservice_session={session}"}
    assert f"Started run {run['run_id']}" in out


def test_dex_with_a_wrong_password_is_one_paragraph_and_nothing_is_sent(kfp_server: FakeKfp, package: Path,
                                                                         tmp_path: Path) -> None:
    _multi_user(kfp_server, "dex").dex_users = {USER: "12341234"}
    (tmp_path / "pw").write_text("wrong\n")
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--dex-user", USER,
                        "--dex-password-file", tmp_path / "pw")
    assert code != 0 and "Dex at" in err and "refused the login of 'user@example.com'" in err
    assert "Traceback" not in err and not [r for r in kfp_server.requests if r.path.startswith(API)]


def test_a_browsers_session_cookie_from_a_file(kfp_server: FakeKfp, package: Path, tmp_path: Path) -> None:
    _multi_user(kfp_server, "dex", dashboard=False)
    kfp_server.cookie_name, kfp_server.sessions = "oauth2_proxy_kubeflow", {"c00kie": USER}
    (tmp_path / "cookie").write_text("oauth2_proxy_kubeflow=c00kie\n")
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--namespace", PROFILE,
                        "--session-cookie-file", tmp_path / "cookie")
    assert code == 0, err
    assert kfp_server.runs and kfp_server.experiments[0]["namespace"] == PROFILE
    (tmp_path / "cookie").write_text("oauth2_proxy_kubeflow=expired\n")
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--session-cookie-file", tmp_path / "cookie")
    assert code != 0 and "HTTP 302" in err and "/dex/auth" in err and "--session-cookie-file" in err


@pytest.mark.parametrize("how", ["file", "env"])
def test_a_bearer_token_from_a_file_or_the_environment(kfp_server: FakeKfp, package: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch, how: str) -> None:
    _multi_user(kfp_server, "token", dashboard=False).tokens = {"sa-token": USER}
    (tmp_path / "token").write_text("sa-token\n")
    monkeypatch.setenv("MY_KFP_TOKEN", "sa-token")
    login = ["--token-file", tmp_path / "token"] if how == "file" else ["--token-env", "MY_KFP_TOKEN"]
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--namespace", PROFILE, *login)
    assert code == 0, err
    assert {r.headers.get("authorization") for r in kfp_server.requests} == {"Bearer sa-token"}
    kfp_server.tokens = {}  # e.g. expired
    code, _, err = _cli("--host", kfp_server.url, "--package", package, *login)
    assert code != 0 and "HTTP 401" in err and "Failed to authenticate token review" in err


def test_iap_identity_token_from_a_service_account_key(kfp_server: FakeKfp, package: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """google-auth's real flow: a JWT assertion signed with the key, exchanged for an identity token."""
    from support.tls_certs import service_account_key

    _multi_user(kfp_server, "iap", dashboard=False).iap_client_id = "123-iap.apps.googleusercontent.com"
    sa = "deployer@project.iam.gserviceaccount.com"
    kfp_server.profiles = {sa: {PROFILE: "contributor"}}
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(service_account_key(tmp_path, kfp_server.url + "/token")))
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--run", "--namespace", PROFILE,
                        "--iap-client-id", "123-iap.apps.googleusercontent.com")
    assert code == 0, err
    [token_request] = kfp_server.sent("POST", "/token") or [r for r in kfp_server.requests if r.path == "/token"]
    assert kfp_server.runs
    code, _, err = _cli("--host", kfp_server.url, "--package", package, "--iap-client-id", "another-client")
    assert code != 0 and "HTTP 401" in err and "Invalid IAP credentials" in err


def test_a_namespace_without_a_profile_is_refused_before_anything_is_uploaded(kfp_server: FakeKfp,
                                                                                package: Path) -> None:
    _multi_user(kfp_server, "token").tokens = {"t": USER}
    message = _deploy_error(kfp_server.url, str(package), run=True, namespace="kubeflow-admin", existing_token="t")
    assert "no access to the namespace 'kubeflow-admin'" in message
    assert f"your profiles: {PROFILE}, team-shared" in message and "Manage Contributors" in message
    assert not kfp_server.sent("POST", "/pipelines/upload")
    kfp_server.dashboard = False  # e.g. a port-forward to the KFP UI: KFP's own SubjectAccessReview says it
    message = _deploy_error(kfp_server.url, str(package), run=True, namespace="kubeflow-admin", existing_token="t")
    assert "no access to the namespace 'kubeflow-admin'" in message and "is not authorized" in message
    assert not kfp_server.sent("POST", "/pipelines/upload")


@pytest.mark.parametrize("profiles, expected", [
    ({}, "You have no Kubeflow profile"),
    ({"a": "contributor", "b": "contributor"}, "several Kubeflow profiles at"),
])
def test_no_or_several_profiles_without_namespace_is_a_paragraph(kfp_server: FakeKfp, package: Path,
                                                                 profiles: dict, expected: str) -> None:
    _multi_user(kfp_server, "token").tokens = {"t": USER}
    kfp_server.profiles = {USER: profiles}
    message = _deploy_error(kfp_server.url, str(package), run=True, existing_token="t")
    assert expected in message and "--namespace" in message and not kfp_server.sent("POST", "/pipelines/upload")


def test_a_backend_too_old_for_retries_is_refused(kfp_server: FakeKfp, package: Path, tmp_path: Path) -> None:
    spec = yaml.safe_load(package.read_text())
    for task in spec["root"]["dag"]["tasks"].values():
        task["retryPolicy"] = {"maxRetryCount": 2}
    retried = tmp_path / "retried.yaml"
    retried.write_text(yaml.safe_dump(spec))
    # 2.4.0 has no retryStrategy; 2.4.1 got it (kubeflow/pipelines#11673 cherry-picked by #11716), as compile says
    kfp_server.tag_name = "2.4.0"
    message = _deploy_error(kfp_server.url, str(retried))
    assert "backend 2.4.0" in message and "needs backend 2.4.1 or later" in message and "retryPolicy" in message
    assert not kfp_server.sent("POST", "/pipelines/upload")
    kfp_server.tag_name = "2.4.1"
    assert deploy(kfp_server.url, str(retried)).pipeline_id
    kfp_server.tag_name = "2.3.0"
    assert deploy(kfp_server.url, str(package), pipeline_name="no-retries").pipeline_id  # nothing asked


def test_a_private_ca_with_ca_bundle_or_without_verification(package: Path, tmp_path: Path) -> None:
    from support.tls_certs import private_ca

    ca, cert, key = private_ca(tmp_path)
    with _serving(FakeKfp(), tls=(cert, key)) as fake:
        code, _, err = _cli("--host", fake.url, "--package", package)
        assert code != 0 and "TLS" in err and "--ca-bundle" in err and not fake.pipelines
        code, _, err = _cli("--host", fake.url, "--package", package, "--ca-bundle", ca)
        assert code == 0, err
        code, _, err = _cli("--host", fake.url, "--package", package, "--no-verify-tls")
        assert code == 0, err
        assert len(fake.pipelines) == 1 and len(fake.versions[next(iter(fake.pipelines))]) == 2


def test_two_ways_to_log_in_are_refused(package: Path, tmp_path: Path) -> None:
    code, _, err = _cli("--host", "http://127.0.0.1:9", "--package", package, "--token-env", "X", "--dex-user", USER)
    assert code != 0 and "--token-env and --dex-user are different ways to log in" in err


def test_runtime_parameters_reach_the_run_and_the_schedule(kfp_server: FakeKfp, package: Path,
                                                           tmp_path: Path) -> None:
    """deploy --param: typed by the package's root parameters (pipeline/kubeflow/runtime_parameters.py),
    sent as the run's runtime_config.parameters; a bad one is refused before anything is sent."""
    spec = yaml.safe_load(package.read_text())
    spec["root"]["inputDefinitions"] = {"parameters": {
        "epochs": {"parameterType": "NUMBER_INTEGER", "defaultValue": 15},
        "learning_rate": {"parameterType": "NUMBER_DOUBLE", "defaultValue": 0.001}}}
    typed = tmp_path / "typed.yaml"
    typed.write_text(yaml.safe_dump(spec))
    deploy(kfp_server.url, str(typed), run=True, schedule="@daily", parameters=["epochs=3", "learning-rate=0.01"])
    assert kfp_server.runs[-1]["runtime_config"]["parameters"] == {"epochs": 3, "learning_rate": 0.01}
    schedule = kfp_server.sent("POST", "/recurringruns")[-1]
    assert schedule.json()["runtime_config"]["parameters"] == {"epochs": 3, "learning_rate": 0.01}
    sent = len(kfp_server.requests)
    for bad in ("epochs=-2", "batch_size=3"):
        with pytest.raises(ProjectError):
            deploy(kfp_server.url, str(typed), run=True, parameters=[bad])
    assert len(kfp_server.requests) == sent


def test_a_multi_user_seaweedfs_root_the_profile_cannot_write_is_refused(kfp_server: FakeKfp, package: Path,
                                                                        tmp_path: Path) -> None:
    """KFP 2.15+ multi-user gives each profile keys of its own, allowed only under private-artifacts/<ns>/,
    private/<ns>/, shared/ and artifacts/ of mlpipeline (pipelines-profile-controller/sync.py:353-373@2.15.0)."""
    def rooted(root: str) -> str:
        path = tmp_path / f"{abs(hash(root))}.yaml"
        path.write_text(package.read_text().replace(PACKAGE_ROOT, root))
        return str(path)

    _multi_user(kfp_server, "token").tokens = {"t": USER}
    kfp_server.tag_name = "2.15.0"
    message = _deploy_error(kfp_server.url, rooted("minio://mlpipeline/tfx"), run=True, existing_token="t",
                            cluster_checks=False)
    assert f"mlpipeline/private-artifacts/{PROFILE}/" in message and "mlpipeline/shared/" in message
    assert f"--pipeline-root minio://mlpipeline/private-artifacts/{PROFILE}/tfx" in message
    assert not kfp_server.sent("POST", "/pipelines/upload")
    # a package under the profile's prefix runs; on 2.5.0 (MinIO, the store's keys everywhere) any root does
    assert deploy(kfp_server.url, rooted(f"minio://mlpipeline/private-artifacts/{PROFILE}/tfx"), run=True,
                  existing_token="t", cluster_checks=False).run_id
    kfp_server.tag_name = "2.5.0"
    assert deploy(kfp_server.url, rooted("minio://mlpipeline/tfx"), run=True, existing_token="t",
                  cluster_checks=False, pipeline_name="on-minio").run_id


def test_a_backend_newer_than_the_tested_ones_is_a_warning(kfp_server: FakeKfp, package: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    from pipeline.kubeflow.backend_version import TESTED_VERSIONS

    kfp_server.tag_name = "2.99.0"
    with caplog.at_level("WARNING"):
        assert deploy(kfp_server.url, str(package)).pipeline_id  # the upload proceeds
    assert f"KFP backend 2.99.0, newer than the versions this project is tested against ({TESTED_VERSIONS[0]}" \
        in caplog.text

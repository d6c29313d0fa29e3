"""A local Kubernetes API server for TFJobs, with the Training Operator's reconciler, over HTTP.

What the Trainer step's launcher (pipeline/kubeflow/training/trainer_launcher.py, through the ``kubernetes`` client)
talks to in the tests. Derived from the real systems, and no kinder than they are:

- paths, verbs and error bodies of the API server for a namespaced custom resource:
  ``/apis/kubeflow.org/v1/namespaces/{ns}/tfjobs[/{name}]``, ``Status`` objects with
  ``reason``/``code`` (401 Unauthorized without the bearer token, 403 Forbidden for a token
  without RBAC on tfjobs, 404 on a missing object or an uninstalled CRD, 409 AlreadyExists,
  422 Invalid, 400 on a namespace mismatch; k8s.io/apimachinery pkg/api/errors);
- create validates like ``kubectl apply --validate=strict`` against the TFJob v1 CRD schema of
  training-operator v1.9.0 and its admission webhook (tests/test_kubeflow_tfjob.py's checks);
- the operator (kubeflow/training-operator v1.9.0): the ``Created`` condition on create
  (tfjob_controller.go onOwnerCreateFunc), one pod per replica with ``TF_CONFIG`` built by
  genTFConfigJSONStr, ``Running`` while the chief runs, ``Succeeded`` when the chief succeeded,
  ``Failed`` ("TFJob ns/name has failed because N Worker replica(s) failed.") as soon as a pod of
  a restartPolicy-Never replica fails, conditions set as pkg/util/status.go setCondition does
  (nothing changes after Failed; Running turns False on Succeeded/Failed), then
  ``cleanPodPolicy: Running`` (the running pods are deleted). Delete removes the job and its pods.

Pods are local processes running the container's own command and args (``python`` → this
interpreter) with the container's env (secrets resolved from ``secrets``), cwd the repository;
the cluster DNS names in ``TF_CONFIG`` resolve to localhost ports. ``kill_after`` kills a pod
(``"worker-0"``) that many seconds after it started: a worker that dies.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from conftest import PROJECT_ROOT, free_ports
from test_kubeflow_tfjob import SCHEMA, operator_tf_config, violations, webhook_problems

from support.kfp_contract import dockerfile_env

_PATH = re.compile(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs(?:/([^/?]+))?/?(?:\?.*)?$")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": {"group": "kubeflow.org", "kind": "tfjobs"}, "code": code}


def set_condition(status: dict, kind: str, message: str) -> None:
    """pkg/util/status.go UpdateJobConditions(..., ConditionTrue, "TFJob"+kind, message)."""
    conditions = status.setdefault("conditions", [])
    if any(c["type"] == "Failed" and c["status"] == "True" for c in conditions):
        return
    current = next((c for c in conditions if c["type"] == kind), None)
    if current and current["status"] == "True" and current["reason"] == f"TFJob{kind}":
        return
    kept = []
    for c in conditions:
        if c["type"] == kind or {c["type"], kind} == {"Running", "Restarting"}:
            continue
        if kind in ("Failed", "Succeeded") and c["type"] == "Running":
            c = {**c, "status": "False"}
        kept.append(c)
    kept.append({"type": kind, "status": "True", "reason": f"TFJob{kind}", "message": message,
                 "lastUpdateTime": _now(), "lastTransitionTime": _now()})
    status["conditions"] = kept


class TFJobApiServer:
    """``with TFJobApiServer(tmp) as api: api.kubeconfig(path, namespace)``; ``api.jobs`` holds what was created."""

    def __init__(self, work_dir, token: str = "pipeline-runner-token", forbidden: bool = False,
                 crd_installed: bool = True, secrets: dict | None = None, poll_s: float = 0.2):
        self.work_dir, self.token, self.forbidden, self.crd_installed = str(work_dir), token, forbidden, crd_installed
        self.secrets, self.poll_s = secrets or {}, poll_s
        self.kill_after: dict[str, float] = {}
        self.jobs: dict[tuple[str, str], dict] = {}   # (namespace, name) -> {object, pods, deleted}
        self.created: list[dict] = []                 # every accepted manifest, in order
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    # -- life cycle ---------------------------------------------------------------------------
    def __enter__(self) -> TFJobApiServer:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
        for record in list(self.jobs.values()):
            self._kill(record, all_pods=True)

    def kubeconfig(self, path, namespace: str = "team") -> str:
        config = {"apiVersion": "v1", "kind": "Config", "current-context": "emulated",
                  "clusters": [{"name": "emulated", "cluster": {"server": self.url}}],
                  "users": [{"name": "runner", "user": {"token": self.token}}],
                  "contexts": [{"name": "emulated", "context": {"cluster": "emulated", "user": "runner",
                                                                "namespace": namespace}}]}
        with open(path, "w") as handle:
            json.dump(config, handle)  # JSON is YAML
        return str(path)

    # -- the API server -----------------------------------------------------------------------
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _route(self, verb: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"null") if length else None
                code, reply = server.handle(verb, self.path, self.headers.get("Authorization", ""), body)
                self._reply(code, reply)

            def do_GET(self) -> None:  # noqa: N802
                self._route("get")

            def do_POST(self) -> None:  # noqa: N802
                self._route("create")

            def do_DELETE(self) -> None:  # noqa: N802
                self._route("delete")

        return Handler

    def handle(self, verb: str, path: str, authorization: str, body) -> tuple[int, dict]:
        if authorization != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        match = _PATH.match(path)
        if not match or not self.crd_installed:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        namespace, name = match.groups()
        if self.forbidden:
            return 403, _status(403, "Forbidden", (
                f'tfjobs.kubeflow.org{f" {json.dumps(name)}" if name else ""} is forbidden: User '
                f'"system:serviceaccount:{namespace}:pipeline-runner" cannot {verb} resource "tfjobs" in API '
                f'group "kubeflow.org" in the namespace "{namespace}"'))
        with self.lock:
            if verb == "create" and name is None:
                return self._create(namespace, body)
            record = self.jobs.get((namespace, name))
            if record is None or name is None:
                return 404, _status(404, "NotFound", f'tfjobs.kubeflow.org "{name}" not found')
            if verb == "get":
                return 200, json.loads(json.dumps(record["object"]))
            if verb == "delete":
                del self.jobs[(namespace, name)]
                record["deleted"] = True
                self._kill(record, all_pods=True)
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
        return 405, _status(405, "MethodNotAllowed", f"{verb} is not supported here")

    def _create(self, namespace: str, manifest: dict) -> tuple[int, dict]:
        name = (manifest.get("metadata") or {}).get("name", "")
        if manifest.get("metadata", {}).get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the provided object does not match the "
                                "namespace sent on the request")
        problems = violations(manifest, SCHEMA["openAPIV3Schema"]) + webhook_problems(manifest)
        if manifest.get("apiVersion") != "kubeflow.org/v1" or manifest.get("kind") != "TFJob":
            problems.append("apiVersion/kind: must be kubeflow.org/v1 TFJob")
        if problems:
            return 422, _status(422, "Invalid", f'TFJob.kubeflow.org "{name}" is invalid: {problems}')
        if (namespace, name) in self.jobs:
            return 409, _status(409, "AlreadyExists", f'tfjobs.kubeflow.org "{name}" already exists')
        stored = json.loads(json.dumps(manifest))
        stored["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now(),
                                  resourceVersion="1")
        stored["status"] = {}
        record = {"object": stored, "pods": {}, "deleted": False}
        self.jobs[(namespace, name)] = record
        self.created.append(json.loads(json.dumps(manifest)))
        threading.Thread(target=self._operate, args=(record,), daemon=True).start()
        return 201, json.loads(json.dumps(stored))

    # -- the training operator ----------------------------------------------------------------
    def _operate(self, record: dict) -> None:
        job = record["object"]
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        with self.lock:
            set_condition(job["status"], "Created", f"TFJob {name} is created.")
        specs = job["spec"]["tfReplicaSpecs"]
        pods = [(kind, i) for kind, spec in specs.items() for i in range(spec.get("replicas", 1))]
        ports = dict(zip(pods, free_ports(len(pods))))
        dns = {f"{name}-{kind.lower()}-{i}.{namespace}.svc:2222": f"localhost:{port}"
               for (kind, i), port in ports.items()}
        with self.lock:
            if record["deleted"]:
                return
            for kind, index in pods:
                record["pods"][f"{kind.lower()}-{index}"] = self._start_pod(job, kind, index, dns)
        while True:
            time.sleep(self.poll_s)
            with self.lock:
                if record["deleted"] or self._reconcile(record):
                    return

    def _start_pod(self, job: dict, kind: str, index: int, dns: dict) -> dict:
        container = next(c for c in job["spec"]["tfReplicaSpecs"][kind]["template"]["spec"]["containers"]
                         if c["name"] == "tensorflow")
        tf_config = operator_tf_config(job, kind, index)
        for address, local in dns.items():
            tf_config = tf_config.replace(address, local)
        env = {**os.environ, **dockerfile_env(), "PYTHONPATH": str(PROJECT_ROOT), "TF_CONFIG": tf_config}
        for variable in container.get("env", []):
            ref = (variable.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref["key"] not in self.secrets.get(ref["name"], {}):
                # The kubelet cannot create the container: the pod stays Pending, neither active nor failed.
                return {"process": None, "kind": kind, "pending": f"CreateContainerConfigError: secret "
                        f"{ref['name']!r} (key {ref['key']!r}) not found"}
            env[variable["name"]] = self.secrets[ref["name"]][ref["key"]] if ref else variable["value"]
        pod = f"{job['metadata']['name']}-{kind.lower()}-{index}"
        log_path = os.path.join(self.work_dir, f"{pod}.log")
        command = [sys.executable if part == "python" else part for part in container["command"]]
        with open(log_path, "w") as log:
            process = subprocess.Popen([*command, *container.get("args", [])], cwd=PROJECT_ROOT, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return {"process": process, "started": time.monotonic(), "log": log_path, "tf_config": tf_config,
                "kind": kind}

    def _reconcile(self, record: dict) -> bool:
        """One pass of UpdateJobStatus; True once the job finished (and its running pods are cleaned)."""
        job = record["object"]
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        started = {key: pod for key, pod in record["pods"].items() if pod["process"] is not None}
        for key, pod in started.items():
            after = self.kill_after.get(key)
            if after is not None and pod["process"].poll() is None and time.monotonic() - pod["started"] >= after:
                os.killpg(pod["process"].pid, signal.SIGKILL)
                pod["process"].wait()
        replicas: dict[str, dict] = {}
        for pod in started.values():
            code = pod["process"].poll()
            counts = replicas.setdefault(pod["kind"], {"active": 0, "succeeded": 0, "failed": 0})
            counts["active" if code is None else "succeeded" if code == 0 else "failed"] += 1
        status = job["status"]
        status["replicaStatuses"] = {k: {f: n for f, n in v.items() if n} for k, v in replicas.items()}
        chief = replicas.get("Chief", {})
        if chief.get("active"):
            set_condition(status, "Running", f"TFJob {namespace}/{name} is running.")
        if chief.get("succeeded") == job["spec"]["tfReplicaSpecs"]["Chief"].get("replicas", 1):
            set_condition(status, "Succeeded", f"TFJob {namespace}/{name} successfully completed.")
        for kind in sorted(replicas):
            if replicas[kind]["failed"]:
                set_condition(status, "Failed", f"TFJob {namespace}/{name} has failed because "
                              f"{replicas[kind]['failed']} {kind} replica(s) failed.")
        finished = any(c["type"] in ("Succeeded", "Failed") and c["status"] == "True" for c in status["conditions"])
        if finished:
            self._kill(record, all_pods=False)
        return finished

    @staticmethod
    def _kill(record: dict, all_pods: bool) -> None:
        """cleanPodPolicy Running: the pods still running are deleted (all of them on a job delete)."""
        for pod in record["pods"].values():
            if pod["process"] is not None and (pod["process"].poll() is None or all_pods):
                try:
                    os.killpg(pod["process"].pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                pod["process"].wait()

    def log(self, pod: str) -> str:
        with open(os.path.join(self.work_dir, f"{pod}.log")) as handle:
            return handle.read()


def run_with_a_dying_replica(tmp_path, spec: dict, step_env: dict, replica: str, after_s: float = 20.0):
    """Run the compiled ``spec`` on the emulated cluster while ``replica`` ("worker-0") of the step's
    TFJob is killed ``after_s`` seconds after it started; -> (the TaskFailed, the TFJob's name, the
    cluster). Fails the test when the run does not fail."""
    import pytest

    from support.kfp_contract import Cluster, TaskFailed

    (tmp_path / "pods").mkdir(exist_ok=True)
    with TFJobApiServer(tmp_path / "pods") as server:
        server.kill_after[replica] = after_s
        cluster = Cluster(str(tmp_path), allow_local_root=True,
                          env={**step_env, "KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})
        with pytest.raises(TaskFailed) as caught:
            cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"])
        (manifest,) = server.created
    return caught.value, manifest["metadata"]["name"], cluster

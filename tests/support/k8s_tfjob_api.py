"""A local Kubernetes API server for TFJobs and TrainJobs, with their controllers, over HTTP.

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

- Kubeflow Trainer v2 (kubeflow/trainer v2.1.0) when ``apis`` has "trainjob":
  ``/apis/trainer.kubeflow.org/v1alpha1/namespaces/{ns}/trainjobs[/{name}]`` validated against the
  TrainJob CRD schema (tests/data/trainjob_crd_schema.json) and the webhooks (metadata.name a
  DNS-1035 label; the ClusterTrainingRuntime must exist, denied with HTTP 403 as
  controller-runtime's ``admission.Denied`` answers, runtime/core/clustertrainingruntime.go
  ValidateObjects; podTemplateOverrides naming only the runtime's jobs and containers, no env for
  the ``node`` container, plugins/jobset/jobset.go Validate); the controller builds the runtime's
  JobSet as plainml.go and jobset/builder.go do (``trainer.numNodes`` pods of the ancestor-trainer
  job, image/command/args/resourcesPerNode from ``trainer``, ``trainer.env`` upserted, the
  override's metadata and spec merged into the pod template), an Indexed Job's pods get
  ``JOB_COMPLETION_INDEX`` (the Job controller), a failed pod is re-created until ``backoffLimit``
  (default 6) is used up, then JobSet's ``Failed``/FailedJobs ("jobset failed due to one or more job
  failures"), all pods succeeded ``Complete``/AllJobsCompleted, copied to the TrainJob's conditions
  (trainer's jobset.go status); ``GET .../clustertrainingruntimes/{name}``;
- discovery: ``GET /apis/{group}/{version}`` lists the group's resources (an APIResourceList), 404
  for a group the cluster does not serve; ``GET /api/v1/namespaces/{ns}/secrets/{name}`` and
  ``.../configmaps/{name}`` (``secrets``/``configmaps`` keyed by name, in every namespace, or by
  (namespace, name)); a missing object is HTTP 404 with the ``Status`` object the real server
  sends (the Kubernetes API conventions, "Response Status Kind": kind Status, status Failure,
  reason NotFound, code 404, details name/group/kind; message and details as
  k8s.io/apimachinery pkg/api/errors NewNotFound writes them: ``configmaps "kfp-launcher" not found``);
- Istio (``istio_injection``: the namespace is labelled ``istio-injection=enabled``, as the
  Kubeflow profile controller labels profile namespaces): a pod without the
  ``sidecar.istio.io/inject: "false"`` label (or, lacking the label, annotation) gets an
  ``istio-proxy`` container that never exits, so the pod's phase stays Running after its main
  container ended, and both controllers, which judge pods by phase, never finish the job
  (kubeflow/trainer#1183).

Pods are local processes running the container's own command and args (``python`` → this
interpreter) with the container's env (secrets resolved from ``secrets``), cwd the repository;
the cluster DNS names in ``TF_CONFIG`` (TrainJob: in any env value) resolve to localhost ports.
A worker that dies: ``kill_at`` kills a pod (``"worker-0"``, ``"node-0-1"``) once its own progress
counter shows a point (``("training steps", 5)``, ``("trials begun", 1)``: ``stackenv.progress`` files
in the pod's ``PIPELINE_PROGRESS_DIR``, read each reconcile pass), the pod held there until then
(tests/support/pod_hold.py), so the kill lands at the same point on a fast machine and a slow one;
``killed`` records the counts each such pod had reached. ``kill_after`` kills a pod that many seconds
after it started: only ``0.0`` (at once, before it did anything) means the same on any machine.
``trial_barrier`` (pod keys): each of these KerasTuner runners' first trial waits until all of them
began one, so every runner takes a trial however the pods' start-ups interleave.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from stackenv import progress

from conftest import PROJECT_ROOT, free_ports
from test_kubeflow_tfjob import SCHEMA, operator_tf_config, violations, webhook_problems

from support import pod_hold
from support.kfp_contract import dockerfile_env

_PATH = re.compile(r"^/apis/kubeflow\.org/v1/namespaces/([^/]+)/tfjobs(?:/([^/?]+))?/?(?:\?.*)?$")
_TRAINJOB_PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs(?:/([^/?]+))?/?(?:\?.*)?$")
_RUNTIME_PATH = re.compile(r"^/apis/trainer\.kubeflow\.org/v1alpha1/clustertrainingruntimes/([^/?]+)/?(?:\?.*)?$")
_DISCOVERY_PATH = re.compile(r"^/apis/([^/]+)/([^/?]+)/?(?:\?.*)?$")
_SECRET_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/secrets/([^/?]+)/?(?:\?.*)?$")
_CONFIGMAP_PATH = re.compile(r"^/api/v1/namespaces/([^/]+)/configmaps/([^/?]+)/?(?:\?.*)?$")
#: What each API serves (discovery), by the name ``apis`` uses.
APIS = {"tfjob": ("kubeflow.org", "v1", [("tfjobs", "TFJob", True)]),
        "trainjob": ("trainer.kubeflow.org", "v1alpha1", [
            ("trainjobs", "TrainJob", True), ("trainingruntimes", "TrainingRuntime", True),
            ("clustertrainingruntimes", "ClusterTrainingRuntime", False)])}
TRAINJOB_SCHEMA = json.loads((PROJECT_ROOT / "tests" / "data" / "trainjob_crd_schema.json").read_text())
NO_SIDECAR_KEY = "sidecar.istio.io/inject"
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": {"group": "kubeflow.org", "kind": "tfjobs"}, "code": code}


def not_found(resource: str, name: str, group: str = "") -> tuple[int, dict]:
    """apimachinery errors.NewNotFound(schema.GroupResource{group, resource}, name) as the server encodes it
    (``details.group`` omitted when empty: omitempty)."""
    qualified = f"{resource}.{group}" if group else resource
    details = {"name": name, **({"group": group} if group else {}), "kind": resource}
    return 404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                 "message": f'{qualified} "{name}" not found', "reason": "NotFound", "details": details, "code": 404}


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
                 crd_installed: bool = True, secrets: dict | None = None, poll_s: float = 0.2,
                 apis: tuple[str, ...] = ("tfjob",), runtimes: dict | None = None, istio_injection: bool = False,
                 secrets_forbidden: bool = False, configmaps: dict | None = None):
        self.work_dir, self.token, self.forbidden = str(work_dir), token, forbidden
        self.apis = tuple(apis) if crd_installed else ()
        self.crd_installed = "tfjob" in self.apis
        self.secrets, self.poll_s = secrets or {}, poll_s
        self.configmaps = configmaps or {}  # name or (namespace, name) -> {"data": ..., "metadata": ...}
        self.reads: list[str] = []          # every GET path, in order
        self.istio_injection, self.secrets_forbidden = istio_injection, secrets_forbidden
        if runtimes is None and "trainjob" in self.apis:  # the runtime this project ships, applied
            import yaml

            shipped = yaml.safe_load((PROJECT_ROOT / "kubeflow" / "trainjob-runtime.yaml").read_text())
            runtimes = {shipped["metadata"]["name"]: shipped}
        self.runtimes = runtimes or {}
        self.kill_after: dict[str, float] = {}                # pod key -> seconds after its start
        self.kill_at: dict[str, tuple[str, int]] = {}        # pod key -> (progress counter, n) it is killed at
        self.killed: dict[str, dict[str, int]] = {}          # pod key -> its progress counts when kill_at killed it
        self.trial_barrier: tuple[str, ...] = ()             # pod keys whose first trials wait for each other
        self.progress_dirs: dict[str, str] = {}              # pod key -> its progress folder (those two only)
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
        no_route = (404, _status(404, "NotFound", "the server could not find the requested resource"))
        if verb == "get":
            self.reads.append(path.split("?")[0])
        if verb == "get" and _SECRET_PATH.match(path):
            return self._secret(*_SECRET_PATH.match(path).groups())
        if verb == "get" and _CONFIGMAP_PATH.match(path):
            return self._configmap(*_CONFIGMAP_PATH.match(path).groups())
        if _TRAINJOB_PATH.match(path) or _RUNTIME_PATH.match(path):
            if "trainjob" not in self.apis:
                return no_route
            if _RUNTIME_PATH.match(path):
                runtime_name = _RUNTIME_PATH.match(path).group(1)
                runtime = self.runtimes.get(runtime_name)
                if verb != "get":
                    return no_route
                return (200, runtime) if runtime else not_found(
                    "clustertrainingruntimes", runtime_name, "trainer.kubeflow.org")
            return self._trainjobs(verb, *_TRAINJOB_PATH.match(path).groups(), body)
        if verb == "get" and _DISCOVERY_PATH.match(path):
            return self._discovery(*_DISCOVERY_PATH.match(path).groups())
        match = _PATH.match(path)
        if not match or not self.crd_installed:
            return no_route
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

    def _discovery(self, group: str, version: str) -> tuple[int, dict]:
        """An APIResourceList for a served group/version (k8s.io/apimachinery metav1), else 404."""
        for api in self.apis:
            served_group, served_version, resources = APIS[api]
            if (group, version) == (served_group, served_version):
                return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}",
                             "resources": [{"name": plural, "singularName": kind.lower(), "namespaced": namespaced,
                                            "kind": kind, "verbs": ["create", "delete", "get", "list", "patch",
                                                                    "update", "watch"]}
                                           for plural, kind, namespaced in resources]}
        return 404, _status(404, "NotFound", "the server could not find the requested resource")

    def _secret(self, namespace: str, name: str) -> tuple[int, dict]:
        if self.secrets_forbidden:
            return 403, _status(403, "Forbidden", f'secrets "{name}" is forbidden: User "system:serviceaccount:'
                                f'{namespace}:pipeline-runner" cannot get resource "secrets" in API group "" in the '
                                f'namespace "{namespace}"')
        secret = self.secrets.get((namespace, name), self.secrets.get(name))
        if secret is None:
            return not_found("secrets", name)
        import base64

        return 200, {"kind": "Secret", "apiVersion": "v1", "metadata": {"name": name, "namespace": namespace},
                     "type": "Opaque", "data": {k: base64.b64encode(str(v).encode()).decode()
                                                for k, v in secret.items()}}

    def _configmap(self, namespace: str, name: str) -> tuple[int, dict]:
        stored = self.configmaps.get((namespace, name), self.configmaps.get(name))
        if stored is None:
            return not_found("configmaps", name)
        metadata = {**stored.get("metadata", {}), "name": name, "namespace": namespace}
        return 200, {"kind": "ConfigMap", "apiVersion": "v1", "metadata": metadata, "data": dict(stored["data"])}

    def _trainjobs(self, verb: str, namespace: str, name: str | None, body) -> tuple[int, dict]:
        if self.forbidden:
            return 403, _status(403, "Forbidden", (
                f'trainjobs.trainer.kubeflow.org{f" {json.dumps(name)}" if name else ""} is forbidden: User '
                f'"system:serviceaccount:{namespace}:pipeline-runner" cannot {verb} resource "trainjobs" in API '
                f'group "trainer.kubeflow.org" in the namespace "{namespace}"'))
        with self.lock:
            if verb == "create" and name is None:
                return self._create_trainjob(namespace, body)
            record = self.jobs.get((namespace, name))
            if record is None or name is None or record["object"]["kind"] != "TrainJob":
                return 404, _status(404, "NotFound", f'trainjobs.trainer.kubeflow.org "{name}" not found')
            if verb == "get":
                return 200, json.loads(json.dumps(record["object"]))
            if verb == "delete":
                del self.jobs[(namespace, name)]
                record["deleted"] = True
                self._kill(record, all_pods=True)
                return 200, {"kind": "Status", "apiVersion": "v1", "status": "Success", "details": {"name": name}}
        return 405, _status(405, "MethodNotAllowed", f"{verb} is not supported here")

    def _trainjob_webhook(self, manifest: dict) -> list[str]:
        """The TrainJob webhook's checks that answer with a denial (HTTP 403), after the schema's 422s."""
        spec = manifest.get("spec") or {}
        ref = spec.get("runtimeRef") or {}
        if ref.get("kind", "ClusterTrainingRuntime") != "ClusterTrainingRuntime":
            return [f"unsupported runtime: {ref.get('kind')}"]  # only the cluster runtime is installed here
        runtime = self.runtimes.get(ref.get("name"))
        if runtime is None:
            return [f'spec.RuntimeRef: Invalid value: {json.dumps(ref)}: clustertrainingruntimes.trainer.kubeflow.org '
                    f'"{ref.get("name")}" not found: specified clusterTrainingRuntime must be created before the '
                    "TrainJob is created"]
        jobs = {j["name"]: {c["name"] for c in j["template"]["spec"]["template"]["spec"]["containers"]}
                for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
        problems = []
        for override in spec.get("podTemplateOverrides") or []:
            for target in override.get("targetJobs") or []:
                if target["name"] not in jobs:
                    problems.append("spec.podTemplateOverrides: must not have targetJob that doesn't exist in the "
                                    "runtime job template")
                    continue
                for container in (override.get("spec") or {}).get("containers") or []:
                    if container["name"] not in jobs[target["name"]]:
                        problems.append(f"spec.podTemplateOverrides: must not have container that doesn't exist in "
                                        f"the runtime job {target['name']}")
                    elif container.get("env") and container["name"] == "node":
                        problems.append("spec.podTemplateOverrides: must not have envs for the dataset-initializer, "
                                        "model-initializer, node containers")
        return problems

    def _create_trainjob(self, namespace: str, manifest: dict) -> tuple[int, dict]:
        name = (manifest.get("metadata") or {}).get("name", "")
        if manifest.get("metadata", {}).get("namespace", namespace) != namespace:
            return 400, _status(400, "BadRequest", "the namespace of the provided object does not match the "
                                "namespace sent on the request")
        problems = violations(manifest, TRAINJOB_SCHEMA["openAPIV3Schema"])
        if manifest.get("apiVersion") != "trainer.kubeflow.org/v1alpha1" or manifest.get("kind") != "TrainJob":
            problems.append("apiVersion/kind: must be trainer.kubeflow.org/v1alpha1 TrainJob")
        if not _DNS_1035.match(name) or len(name) > 63:  # the CRD's x-kubernetes-validations on metadata.name
            problems.append("metadata.name must match RFC 1035 DNS label format")
        if problems:
            return 422, _status(422, "Invalid", f'TrainJob.trainer.kubeflow.org "{name}" is invalid: {problems}')
        denied = self._trainjob_webhook(manifest)
        if denied:
            return 403, _status(403, "Forbidden", 'admission webhook "validator.trainjob.trainer.kubeflow.org" '
                                f"denied the request: {'; '.join(denied)}")
        if (namespace, name) in self.jobs:
            return 409, _status(409, "AlreadyExists", f'trainjobs.trainer.kubeflow.org "{name}" already exists')
        stored = json.loads(json.dumps(manifest))
        stored["metadata"].update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=_now(),
                                  resourceVersion="1")
        stored["status"] = {}
        record = {"object": stored, "pods": {}, "deleted": False}
        self.jobs[(namespace, name)] = record
        self.created.append(json.loads(json.dumps(manifest)))
        threading.Thread(target=self._operate_trainjob, args=(record,), daemon=True).start()
        return 201, json.loads(json.dumps(stored))

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
        template = job["spec"]["tfReplicaSpecs"][kind]["template"]
        container = next(c for c in template["spec"]["containers"] if c["name"] == "tensorflow")
        tf_config = operator_tf_config(job, kind, index)
        for address, local in dns.items():
            tf_config = tf_config.replace(address, local)
        pod = self._spawn(f"{job['metadata']['name']}-{kind.lower()}-{index}", container,
                          template.get("metadata") or {}, {"TF_CONFIG": tf_config}, {}, f"{kind.lower()}-{index}")
        return {**pod, "kind": kind, "tf_config": tf_config}

    def _injected(self, metadata: dict) -> bool:
        """Istio's injection decision for a pod in this namespace (pkg/kube/inject: the pod's
        sidecar.istio.io/inject label wins over the annotation of that name)."""
        if not self.istio_injection:
            return False
        value = (metadata.get("labels") or {}).get(NO_SIDECAR_KEY)
        if value is None:
            value = (metadata.get("annotations") or {}).get(NO_SIDECAR_KEY)
        return str(value).lower() != "false"

    def _spawn(self, pod: str, container: dict, metadata: dict, extra_env: dict, dns: dict, key: str) -> dict:
        """Start the pod's main container as a local process; Pending (no process) when a secret is missing.
        A pod of ``kill_at`` or ``trial_barrier`` runs its command under tests/support/pod_hold.py."""
        env = {**os.environ, **dockerfile_env(), "PYTHONPATH": str(PROJECT_ROOT), **extra_env}
        for variable in container.get("env", []):
            ref = (variable.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref["key"] not in self.secrets.get(ref["name"], {}):
                # The kubelet cannot create the container: the pod stays Pending, neither active nor failed.
                return {"process": None, "pending": f"CreateContainerConfigError: secret "
                        f"{ref['name']!r} (key {ref['key']!r}) not found", "sidecar": False}
            value = self.secrets[ref["name"]][ref["key"]] if ref else variable["value"]
            for address, local in dns.items():
                value = value.replace(address, local)
            env[variable["name"]] = value
        log_path = os.path.join(self.work_dir, f"{pod}.log")
        command = [sys.executable if part == "python" else part for part in container["command"]]
        progress_dir = None
        if key in self.kill_at or key in self.trial_barrier:
            command, progress_dir = self._held(command, key, env)
        with open(log_path, "w") as log:
            process = subprocess.Popen([*command, *container.get("args", [])], cwd=PROJECT_ROOT, env=env,
                                       stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        return {"process": process, "started": time.monotonic(), "log": log_path, "name": pod,
                "sidecar": self._injected(metadata), "env": {k: env[k] for k in extra_env}, "progress": progress_dir}

    def _held(self, command: list[str], key: str, env: dict) -> tuple[list[str], str]:
        """``python -m MODULE`` under pod_hold.py (the hold point and the trial barrier in ``env``), and a fresh
        progress folder for this pod (a re-created pod starts from zero)."""
        if command[:2] != [sys.executable, "-m"]:
            raise ValueError(f"kill_at/trial_barrier need a `python -m MODULE` container command, not {command}")
        progress_dir = self.progress_dirs[key] = tempfile.mkdtemp(prefix=f"{key}.progress.", dir=self.work_dir)
        env[progress.PROGRESS_DIR_ENV] = progress_dir
        if key in self.kill_at:
            what, n = self.kill_at[key]
            env[pod_hold.HOLD_ENV] = f"{what}={n}"
        if key in self.trial_barrier:
            env[pod_hold.BARRIER_ENV] = f"{os.path.join(self.work_dir, 'trial-barrier')}={len(self.trial_barrier)}"
        return [sys.executable, str(PROJECT_ROOT / "tests" / "support" / "pod_hold.py"), *command[1:]], progress_dir

    @staticmethod
    def _phase(pod: dict) -> str:
        """Running while any container runs: an injected istio-proxy never exits."""
        if pod["process"] is None:
            return "Pending"
        code = pod["process"].poll()
        if code is None or pod["sidecar"]:
            return "Running"
        return "Succeeded" if code == 0 else "Failed"

    # -- Kubeflow Trainer v2 ------------------------------------------------------------------
    def _node_pod_template(self, job: dict) -> tuple[dict, int, int, bool]:
        """The trainer job's pod template as plainml.go and jobset/builder.go build it; -> (template, pods,
        backoffLimit, indexed)."""
        spec = job["spec"]
        runtime = json.loads(json.dumps(self.runtimes[spec["runtimeRef"]["name"]]))
        rjob = next(j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
                    if (j["template"].get("metadata") or {}).get("labels", {}).get(
                        "trainer.kubeflow.org/trainjob-ancestor-step") == "trainer")
        job_spec = rjob["template"]["spec"]
        template = job_spec["template"]
        trainer = spec.get("trainer") or {}
        container = next(c for c in template["spec"]["containers"] if c["name"] == "node")
        for key in ("image", "command", "args"):
            if trainer.get(key) is not None:
                container[key] = trainer[key]
        if trainer.get("resourcesPerNode"):
            container["resources"] = trainer["resourcesPerNode"]
        env = {e["name"]: e for e in container.get("env", [])}
        env.update({e["name"]: e for e in trainer.get("env", [])})
        container["env"] = list(env.values())
        for override in spec.get("podTemplateOverrides") or []:
            if not any(t["name"] == rjob["name"] for t in override.get("targetJobs", [])):
                continue
            metadata = template.setdefault("metadata", {})
            for key in ("labels", "annotations"):
                metadata.setdefault(key, {}).update((override.get("metadata") or {}).get(key) or {})
            for key, value in (override.get("spec") or {}).items():
                if key == "containers":
                    for patch in value:
                        target = next(c for c in template["spec"]["containers"] if c["name"] == patch["name"])
                        target["volumeMounts"] = [*target.get("volumeMounts", []), *patch.get("volumeMounts", [])]
                else:
                    template["spec"][key] = value
        count = trainer.get("numNodes") or (runtime["spec"].get("mlPolicy") or {}).get("numNodes") or \
            job_spec.get("parallelism") or 1
        return template, int(count), int(job_spec.get("backoffLimit", 6)), job_spec.get("completionMode") == "Indexed"

    def _operate_trainjob(self, record: dict) -> None:
        job = record["object"]
        name = job["metadata"]["name"]
        template, count, backoff, indexed = self._node_pod_template(job)
        container = next(c for c in template["spec"]["containers"] if c["name"] == "node")
        ports = free_ports(count)
        dns = {f"{name}-node-0-{i}.{name}:{port}": f"localhost:{ports[i]}"
               for i in range(count) for port in [2222]}
        record.update(failures=0, backoff=backoff)

        def start(index: int) -> dict:
            extra = {"JOB_COMPLETION_INDEX": str(index)} if indexed else {}
            pod = self._spawn(f"{name}-node-0-{index}", container, template.get("metadata") or {}, extra, dns,
                              f"node-0-{index}")
            return {**pod, "kind": "node", "index": index}

        record["start"] = start
        with self.lock:
            if record["deleted"]:
                return
            for index in range(count):
                record["pods"][f"node-0-{index}"] = start(index)
        while True:
            time.sleep(self.poll_s)
            with self.lock:
                if record["deleted"] or self._reconcile_trainjob(record):
                    return

    def _reconcile_trainjob(self, record: dict) -> bool:
        """One pass of the Job, JobSet and TrainJob controllers; True once the job finished."""
        job = record["object"]
        self._apply_kills(record)
        phases = {key: self._phase(pod) for key, pod in record["pods"].items()}
        for key, phase in phases.items():
            if phase == "Failed" and not record["pods"][key].get("counted"):
                record["pods"][key]["counted"] = True
                record["failures"] += 1
                if record["failures"] <= record["backoff"]:  # the Job controller re-creates the pod
                    record["pods"][key] = record["start"](record["pods"][key]["index"])
                    phases[key] = "Running"
        counts = {"active": sum(p in ("Running", "Pending") for p in phases.values()),
                  "succeeded": sum(p == "Succeeded" for p in phases.values()), "failed": record["failures"]}
        job["status"]["jobsStatus"] = [{"name": "node", **{k: v for k, v in counts.items()}}]
        conditions = job["status"].setdefault("conditions", [])
        if any(c["type"] in ("Complete", "Failed") and c["status"] == "True" for c in conditions):
            return True
        if record["failures"] > record["backoff"]:
            conditions.append({"type": "Failed", "status": "True", "reason": "FailedJobs",
                               "message": "jobset failed due to one or more job failures",
                               "lastTransitionTime": _now()})
        elif counts["succeeded"] == len(phases):
            conditions.append({"type": "Complete", "status": "True", "reason": "AllJobsCompleted",
                               "message": "jobset completed successfully", "lastTransitionTime": _now()})
        else:
            return False
        self._kill(record, all_pods=False)  # a failed Job's remaining pods are deleted
        return True

    def _apply_kills(self, record: dict) -> None:
        for key, pod in record["pods"].items():
            if pod["process"] is None or pod["process"].poll() is not None:
                continue
            after, point = self.kill_after.get(key), self.kill_at.get(key)
            counts = progress.read(pod["progress"])[0] if point else {}
            if (after is not None and time.monotonic() - pod["started"] >= after) or \
                    (point and counts.get(point[0], 0) >= point[1]):
                os.killpg(pod["process"].pid, signal.SIGKILL)
                pod["process"].wait()
                if point:
                    self.killed[key] = counts

    def counts(self, key: str) -> dict[str, int]:
        """The progress counts the latest pod ``key`` of ``kill_at`` or ``trial_barrier`` wrote."""
        return progress.read(self.progress_dirs[key])[0] if key in self.progress_dirs else {}

    def _reconcile(self, record: dict) -> bool:
        """One pass of UpdateJobStatus; True once the job finished (and its running pods are cleaned)."""
        job = record["object"]
        name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
        started = {key: pod for key, pod in record["pods"].items() if pod["process"] is not None}
        self._apply_kills(record)
        replicas: dict[str, dict] = {}
        for pod in started.values():
            phase = self._phase(pod)
            counts = replicas.setdefault(pod["kind"], {"active": 0, "succeeded": 0, "failed": 0})
            counts["active" if phase == "Running" else "succeeded" if phase == "Succeeded" else "failed"] += 1
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


def run_with_a_dying_replica(tmp_path, spec: dict, step_env: dict, replica: str, at: tuple[str, int],
                             trial_barrier: tuple[str, ...] = ()):
    """Run the compiled ``spec`` on the emulated cluster while ``replica`` ("worker-0") of the step's
    TFJob is killed once its progress counter reached ``at`` (``("training steps", 5)``: ``kill_at``);
    -> (the TaskFailed, the TFJob's name, the cluster, the counts the replica had when killed). Fails
    the test, naming what happened, when the replica was never killed or the run did not fail."""
    import pytest

    from support.kfp_contract import Cluster, TaskFailed

    (tmp_path / "pods").mkdir(exist_ok=True)
    with TFJobApiServer(tmp_path / "pods") as server:
        server.kill_at[replica], server.trial_barrier = at, trial_barrier
        cluster = Cluster(str(tmp_path), allow_local_root=True,
                          env={**step_env, "KUBECONFIG": server.kubeconfig(tmp_path / "kubeconfig", "team")})
        failure = None
        try:
            cluster.run(spec, run_id="run-1", runtime_root=spec["defaultPipelineRoot"])
        except TaskFailed as caught:
            failure = caught
        (manifest,) = server.created
        name = manifest["metadata"]["name"]
        if replica not in server.killed:
            pytest.fail(f"{replica} of TFJob {name} was never killed: it ended with its progress at "
                        f"{server.counts(replica)}, before it reached {at[1]} {at[0]}; the run "
                        f"{'failed anyway: ' + str(failure) if failure else 'succeeded'}. Its log ends: "
                        f"{server.log(f'{name}-{replica}')[-2000:]}")
        if failure is None:
            pytest.fail(f"{replica} of TFJob {name} was killed at {server.killed[replica]}, yet the run succeeded")
    return failure, name, cluster, server.killed[replica]

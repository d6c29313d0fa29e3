"""A KFP 2.x backend as a container step sees it, derived from the backend's own source.

No Kubernetes here, so this plays the driver's and the launcher's part for each task of a
compiled PipelineSpec and runs the task's container command in a subprocess. Every rule
below cites the kubeflow/pipelines source it mirrors, at tag ``KFP_BACKEND_TAG`` (the
same code in 2.2-2.5; read it with ``git show 2.3.0:backend/src/v2/...``):

- Pipeline root: the run's ``runtime_config.pipeline_root``, else the launcher config's
  default ``minio://mlpipeline/v2/artifacts`` (driver/driver.go RootDAG;
  config/env.go defaultPipelineRoot). The spec's ``defaultPipelineRoot`` is NOT read by
  the server (apiserver/template/template.go modelToPipelineJobRuntimeConfig): the client
  that creates the run passes it.
- Output artifact URIs: ``<root>/<pipelineInfo.name>/<run id>/<task>/<output key>``
  (metadata/client.go GetPipeline stores ``GenerateOutputURI(root, [pipeline, run])`` as
  the run's root; driver/driver.go provisionOutputs appends ``[task, key]``), with the
  output's declared ``type`` and ``metadata`` and NO name.
- A root the launcher cannot map to a local path (not gs://, minio://, s3://) fails every
  step (component/launcher_v2.go prepareOutputFolders -> localPathForURI).
- The object store (kfp_launcher.py, each rule cited there): the session of the run's root
  from the ``kfp-launcher`` ConfigMap or the bundled store's secret, every input artifact
  downloaded to the pod's disk before the command, the reported output URIs checked against
  the run's bucket and local output folders uploaded, against a real S3 server.
- The pod (driver/driver.go initPodSpecPatch, extendPodSpecPatch): the container's ``env``;
  the platform spec's ``secretAsEnv`` from the namespace's secrets (a missing secret or key
  keeps a real pod in CreateContainerConfigError: here the task fails with kubelet's
  message); ``nodeSelector`` and resource requests (cpu, memory, accelerator) against the
  node (a real pod stays Pending: here the task fails with the scheduler's message). The
  launcher runs in the same container, so it sees the same environment. Kubernetes adds
  ``<SERVICE>_SERVICE_HOST``/``_PORT`` for each Service of the pod's namespace.
- Steps whose ``dependentTasks`` are done run at the same time (the Argo DAG starts a task
  when its dependencies succeed: compiler/argocompiler/dag.go).
- The ExecutorOutput file is parsed strictly (launcher_v2.go getExecutorOutputFile:
  protojson.Unmarshal rejects unknown fields and wrong types).
- ``outputs.outputFile`` is ``/tmp/kfp_outputs/output_metadata.json``
  (component/launcher_v2.go OutputMetadataFilepath), in a fresh pod.
- Parameters: ``runtimeValue.constant`` values as they are in the spec, plus the component's
  declared defaults for missing ones (driver/driver.go resolveInputs;
  component/launcher_v2.go addDefaultParams).
- Upstream artifacts: ``name`` = the MLMD id as a string, the recorded ``uri``,
  ``metadata`` = the artifact's MLMD properties and custom properties, and
  ``type: {instanceSchema: ""}`` (metadata/client.go GetOutputArtifactsByExecutionId:
  ``Schema: "" // TODO``; OutputArtifact.ToRuntimeArtifact; metadata/converter.go
  toRuntimeArtifact).
- What is recorded after a step: the declared output merged with the ExecutorOutput
  file's artifact (uri if set, metadata fields), metadata turned into MLMD custom properties
  (strings stay strings; numbers become doubles; bools ints; lists and structs wrapped as
  ``{"list": ...}``/``{"struct": ...}``; null is an error), plus ``display_name`` and
  ``store_session_info`` (component/launcher_v2.go uploadOutputArtifacts,
  mergeRuntimeArtifacts; metadata/client.go RecordArtifact; metadata/converter.go
  StructValueToMLMDValue). A missing ExecutorOutput file is an empty output
  (getExecutorOutputFile).
- ``{{$}}`` and the other placeholders are replaced inside every argument
  (component/launcher_v2.go getPlaceholders, executeV2); a non-zero exit fails the task.
- Runtime parameters: a run's value for a root parameter is refused when the parameter has no
  ``parameterType`` ("has unspecified type") or a value of another kind, root parameters the run
  leaves out take their ``defaultValue`` (apiserver/template/v2_template.go
  validatePipelineJobInputs; compiler/argocompiler/argo.go), and a task's
  ``componentInputParameter`` takes the root's value (driver/driver.go resolveInputs: "parent DAG
  does not have input parameter").
- Parameters from an upstream task (``taskOutputParameter``): the producer's recorded output
  parameters; the producer must be among the task's ``dependentTasks`` (the Argo DAG orders
  drivers by them only: compiler/argocompiler/dag.go), else it has not run (driver/driver.go
  resolveInputs: "cannot find producer task"). Then every declared parameter is checked and
  converted as handleParamTypeValidationAndConversion does (a STRING input takes any value as
  text; a number, bool, list or struct input refuses another kind; a missing non-optional one
  without default is an error).
- Output parameters: ``outputs.parameters[name].outputFile`` = ``/tmp/kfp/outputs/<name>``
  (driver/driver.go provisionOutputs); after the step, the ExecutorOutput file's
  ``parameterValues`` first, else that file's text parsed by the declared type (launcher_v2.go
  collectOutputParameters; metadata/converter.go TextToPbValue); a missing one fails the task.
- KFP's cache (driver/driver.go getFingerPrint, getFingerPrintsAndID, Container,
  reuseCachedOutputs; cacheutils/cache.go GenerateCacheKey, GenerateFingerPrint;
  launcher_v2.go Execute creates the entry): only for a task whose
  ``cachingOptions.enableCache`` is true, the key is the sha256 of the JSON of the input
  artifact names, input parameter values (as the driver resolved them, before the launcher
  adds defaults), output artifact specs (type and metadata, URI wiped), output parameter
  types, and the container's image and unreplaced command + args; looked up by key and
  pipeline name, newest first. A hit runs nothing and gives the task the cached execution's
  output artifacts (the same MLMD artifacts: same names and URIs) and output parameters; a
  successful run of a task with caching on records its key.

Deviations, each because there is no cluster here: the image is this checkout (its
command's ``python`` is this interpreter; or, with ``image_python``, an environment built
from kubeflow/Dockerfile's own lines by tests/support/image_env.py; its ENV lines are read from kubeflow/Dockerfile,
paths baked into the image are mapped by ``image_paths``); the pod's file system is a fresh
directory per task (``/tmp`` and the launcher's ``/minio``, ``/s3``, ``/gcs`` under it); a
Service's env names the address this machine reaches (not a cluster IP and the service
port); ``env`` adds variables to every pod as an admission webhook would; secret volumes,
tolerations and config maps are not applied; a local-path root can be allowed
(``allow_local_root``, for tests of other things) although a real launcher refuses it; one
namespace (the cache lookup's namespace predicate is always the same).
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from support import kfp_launcher
from support.kfp_backends import NEWEST, STANDALONE_NAMESPACE, Backend
from support.kfp_launcher import LauncherError, Pod

KFP_BACKEND_TAG = "2.3.0"  # the tag the rules above were read at; kfp_backends.py has what later tags change
EXECUTOR_LOGS = "executor-logs"  # driver.go provisionOutputs, 2.5.0+
DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"      # config/env.go
OUTPUT_METADATA_FILEPATH = "/tmp/kfp_outputs/output_metadata.json"  # component/launcher_v2.go
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"  # driver/driver.go provisionOutputs
LAUNCHER_SCHEMES = kfp_launcher.LOCAL_MOUNTS  # localPathForURI
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class TaskFailed(RuntimeError):
    """A task's container exited non-zero, or the launcher refused the task."""

    def __init__(self, task: str, message: str):
        super().__init__(f"{task}: {message}")
        self.task = task


def topological_tasks(spec: dict) -> list[str]:
    tasks = spec["root"]["dag"]["tasks"]
    done: list[str] = []
    while len(done) < len(tasks):
        ready = sorted(t for t, body in tasks.items()
                       if t not in done and all(d in done for d in body.get("dependentTasks", [])))
        if not ready:
            raise ValueError("cycle in the compiled DAG")
        done.extend(ready)
    return done


def generate_output_uri(root: str, *paths: str) -> str:
    """metadata/client.go GenerateOutputURI (query string dropped, as for outputs)."""
    root = root.split("?")[0]
    return f"{root.rstrip('/')}/{os.path.normpath('/'.join(paths)).lstrip('/')}"


local_path_for_uri = kfp_launcher.local_path_for_uri


def parse_executor_output(path: str) -> dict:
    """launcher_v2.go getExecutorOutputFile: none is empty; anything protojson refuses fails the task."""
    if not os.path.exists(path):
        return {"parameterValues": {}, "artifacts": {}}
    with open(path) as handle:
        text = handle.read()
    try:
        json_format.Parse(text, pipeline_spec_pb2.ExecutorOutput())
    except json_format.ParseError as error:
        raise LauncherError(f"failed to unmarshall ExecutorOutput in file {path!r}: {error}") from None
    return json.loads(text)


def platform_config(platform: dict | None, executor_label: str) -> dict:
    """The Kubernetes executor config of one executor (kubernetes_platform, keyed by executor label)."""
    executors = (((platform or {}).get("platforms") or {}).get("kubernetes") or {}).get("deploymentSpec", {})
    return (executors.get("executors") or {}).get(executor_label) or {}


_MEMORY_UNITS = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30}


def _bytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"([\d.]+)([A-Za-z]*)", quantity).groups()
    return float(number) * _MEMORY_UNITS[unit]


def dockerfile_env(path: str = os.path.join(REPO, "kubeflow", "Dockerfile")) -> dict[str, str]:
    """The image's ENV (``ENV A=1 \\ B=2`` blocks)."""
    with open(path) as handle:
        text = handle.read().replace("\\\n", " ")
    env = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            env.update(dict(pair.split("=", 1) for pair in line[4:].split()))
    return env


def _to_mlmd_value(key: str, value):
    """metadata/converter.go StructValueToMLMDValue: what MLMD keeps of a metadata value."""
    if isinstance(value, bool):
        return ("int", int(value))
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, (int, float)):
        return ("double", float(value))
    if isinstance(value, list):
        return ("struct", {"list": value})
    if isinstance(value, dict):
        return ("struct", {"struct": value})
    raise TaskFailed("launcher", f"unknown/unsupported value type for metadata {key!r}: {value!r}")


def _param_to_text(value) -> str:
    """metadata/converter.go PbValueToText."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(int(value)) if float(value).is_integer() else repr(float(value))
    return json.dumps(value, separators=(",", ":"))


def _text_to_param(text: str, kind: str):
    """metadata/converter.go TextToPbValue (numbers are float64, as in a protobuf Value)."""
    if kind == "STRING":
        return text
    if kind == "NUMBER_INTEGER":
        return float(int(text.strip()))
    if kind == "NUMBER_DOUBLE":
        return float(text.strip())
    if kind == "BOOLEAN":
        value = {"true": True, "1": True, "t": True, "false": False, "0": False, "f": False}.get(text.strip().lower())
        if value is None:
            raise ValueError(f"not a bool: {text!r}")
        return value
    value = json.loads(text)
    if not isinstance(value, list if kind == "LIST" else dict):
        raise ValueError("unexpected type")
    return value


_KIND_OF = {str: "STRING", bool: "BOOLEAN", int: "NUMBER", float: "NUMBER", list: "LIST", dict: "STRUCT"}


def _check_parameter(name: str, value, kind: str):
    """driver/driver.go handleParamTypeValidationAndConversion for one declared parameter."""
    if kind == "STRING":
        return value if isinstance(value, str) else _param_to_text(value)
    if value is None:
        raise TaskFailed("driver", f"got null for input parameter {name!r}")
    actual = _KIND_OF.get(type(value), type(value).__name__)
    allowed = {"NUMBER_INTEGER": "NUMBER", "NUMBER_DOUBLE": "NUMBER"}.get(kind, kind)
    if actual != allowed:
        raise TaskFailed("driver", f"input parameter {name!r} type mismatch: expect {kind}, got {actual.lower()}")
    return value


def cache_fingerprint(executor_input: dict, output_parameter_types: Mapping[str, str], container: dict) -> str:
    """cacheutils/cache.go GenerateCacheKey + GenerateFingerPrint (the JSON of the key, sha256)."""
    inputs, outputs = executor_input["inputs"], executor_input["outputs"]
    key = {
        "inputArtifactNames": {name: {"artifactNames": [a.get("name", "") for a in artifacts["artifacts"]]}
                               for name, artifacts in inputs.get("artifacts", {}).items()},
        "inputParameterValues": dict(inputs.get("parameterValues", {})),
        "outputArtifactsSpec": {name: {k: v for k, v in artifacts["artifacts"][0].items() if k in ("type", "metadata")}
                                for name, artifacts in outputs.get("artifacts", {}).items() if artifacts["artifacts"]},
        "outputParametersSpec": {name: output_parameter_types[name] for name in outputs.get("parameters", {})},
        "containerSpec": {"image": container.get("image", ""),
                          "cmdArgs": [*container.get("command", []), *container.get("args", [])]},
    }
    return hashlib.sha256(json.dumps(key, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


_RUN_VALUE_KINDS = {"NUMBER_DOUBLE": (int, float), "NUMBER_INTEGER": (int, float), "STRING": (str,),
                    "BOOLEAN": (bool,), "LIST": (list,), "STRUCT": (dict,)}


def root_parameters(spec: dict, given: Mapping[str, object]) -> dict:
    """apiserver/template/v2_template.go validatePipelineJobInputs, then argo.go's defaults."""
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    values = {}
    for name, parameter in declared.items():
        if name not in given:
            if not parameter.get("isOptional") and "defaultValue" not in parameter:
                raise TaskFailed("apiserver", f"parameter {name} is not optional, yet has neither default value "
                                 "nor user provided value")
            if "defaultValue" in parameter:
                default = parameter["defaultValue"]
                values[name] = float(default) if parameter.get("parameterType", "").startswith("NUMBER") else default
            continue
        kind = parameter.get("parameterType", "PARAMETER_TYPE_ENUM_UNSPECIFIED")
        if kind not in _RUN_VALUE_KINDS:
            raise TaskFailed("apiserver", f"input parameter {name} has unspecified type")
        value = given[name]
        if not isinstance(value, _RUN_VALUE_KINDS[kind]) or (isinstance(value, bool) and kind != "BOOLEAN"):
            raise TaskFailed("apiserver", f"input parameter {name} requires type {kind}, but the parameter value "
                             "is not of that value type")
        values[name] = float(value) if kind.startswith("NUMBER") else value  # a protobuf Value's number
    return values


def _from_mlmd_value(kind_value):
    """metadata/converter.go toRuntimeArtifact propertiesToMetadata."""
    kind, value = kind_value
    return float(value) if kind in ("int", "double") else value


_CLUSTER_DNS = """# Written by tests/support/kfp_contract.py: Kubernetes' cluster DNS for this pod's Python.
import json, socket
_NAMES = json.loads({names!r})
_getaddrinfo = socket.getaddrinfo


def _cluster_getaddrinfo(host, port, *args, **kwargs):
    if isinstance(host, str) and any(key.startswith(host + ":") for key in _NAMES):
        target = _NAMES.get(f"{{host}}:{{port}}")
        # A Service's port that is not defined, or that no server here plays: nothing answers there.
        host, port = target.rsplit(":", 1) if target else ("127.0.0.1", 9)
    return _getaddrinfo(host, int(port) if isinstance(port, str) and port.isdigit() else port, *args, **kwargs)


socket.getaddrinfo = _cluster_getaddrinfo
"""


def cluster_dns(pod_root: str, names: Mapping[str, str]) -> str:
    """A folder whose ``sitecustomize.py`` makes the pod's Python resolve the cluster's Service names
    (``names``: ``service.kubeflow:port`` -> the address this machine reaches). The one part of a pod
    this machine's resolver cannot play: the step's Python finds the store's Service by name."""
    folder = os.path.join(pod_root, "cluster-dns")
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "sitecustomize.py"), "w") as handle:
        handle.write(_CLUSTER_DNS.format(names=json.dumps(dict(names))))
    return folder


class Cluster:
    """The MLMD store and object store of one KFP installation, across runs."""

    def __init__(self, work_dir: str, allow_local_root: bool = False, image_paths: Mapping[str, str] = (),
                 env: Mapping[str, str] = (), timeout: int = 900, *, namespace: str = "kubeflow",
                 secrets: Mapping[str, Mapping[str, str]] = (), launcher_config: Mapping[str, str] | None = None,
                 services: Mapping[str, tuple[int, str]] = (), node_labels: Mapping[str, str] = (),
                 node_allocatable: Mapping[str, str] = (), parallel: bool = True, image_python: str | None = None,
                 backend: Backend = NEWEST, store_address: str | None = None):
        """``secrets``: the namespace's secrets (name -> key -> value); ``launcher_config``: the data
        of its ``kfp-launcher`` ConfigMap (None: there is none); ``services``: the Services of the
        ``kubeflow`` namespace, name -> (service port, the address that serves it here);
        ``image_python``: the interpreter of an environment built from kubeflow/Dockerfile's own lines
        (tests/support/image_env.py): the steps' ``python``, importing the project from its
        site-packages, not from this checkout (None: this interpreter, the checkout on PYTHONPATH);
        ``backend``: the KFP version whose driver, launcher and manifests are played (kfp_backends.py);
        ``store_address``: the S3 server playing that version's bundled store, whose Services (names,
        ports) then come from the backend instead of ``services``."""
        self.work_dir = work_dir
        self.allow_local_root = allow_local_root
        self.image_paths = dict(image_paths)
        self.env = dict(env)
        self.timeout = timeout
        self.namespace = namespace
        self.secrets = {name: dict(data) for name, data in dict(secrets).items()}
        self.launcher_config = dict(launcher_config) if launcher_config is not None else None
        self.backend = backend
        # name -> [(port name, service port, the address this machine reaches or None)], first port first
        self.services = ({name: [(None, *value)] for name, value in dict(services).items()} if not store_address
                         else backend.services(store_address))
        self.node_labels = {"kubernetes.io/os": "linux", **dict(node_labels)}
        self.node_allocatable = {"cpu": "16", "memory": "64Gi", **dict(node_allocatable)}
        self.parallel = parallel
        self.image_python = image_python
        self.pod_disk: dict[str, int] = {}  # last run: task -> bytes the launcher downloaded to its pod
        self.failed_logs: dict[str, str] = {}  # task -> the URI its log was uploaded to although it failed
        self._lock = threading.Lock()
        self.artifacts: dict[int, dict] = {}   # MLMD: id -> {uri, schema, custom_properties}
        self.next_id = 1
        self.executor_inputs: dict[str, dict] = {}  # last run: task -> the ExecutorInput it got
        self.executions: list[dict] = []  # MLMD executions: {task, run, state, artifacts, parameters}
        self.cache: list[tuple[str, str, int]] = []  # the API server's task cache: (key, pipeline, execution)
        self.states: dict[str, str] = {}  # last run: task -> COMPLETE or CACHED
        self.output_parameters: dict[str, dict] = {}  # last run: task -> its output parameters
        self.root_parameters: dict[str, object] = {}  # last run: the root DAG's parameter values

    # -- the driver ---------------------------------------------------------------------------
    def run(self, spec: dict, run_id: str | None = None, runtime_root: str | None = None,
            until: str | None = None, platform: dict | None = None,
            parameters: Mapping[str, object] | None = None) -> dict[str, dict[str, dict]]:
        """One run: each task once its dependencies are done; returns task -> output key -> MLMD artifact.

        The root is the run's (``runtime_root``, what ``deploy`` sends), else the launcher config's
        ``defaultPipelineRoot``, else KFP's default (driver/driver.go RootDAG); never the package's
        ``defaultPipelineRoot``, which the backend does not read. ``until``: that task and the tasks
        it depends on only. ``platform``: the package's Kubernetes platform spec document.
        ``parameters``: the run's runtime parameter values (``runtime_config.parameters``).
        """
        self.root_parameters = root_parameters(spec, parameters or {})
        run_id = run_id or str(uuid.uuid4())
        root = runtime_root or (self.launcher_config or {}).get("defaultPipelineRoot") or DEFAULT_PIPELINE_ROOT
        run_root = generate_output_uri(root, spec["pipelineInfo"]["name"], run_id)
        if "?" in root:  # metadata/client.go GenerateOutputURI(..., preserveQueryString=true) for the run's root
            run_root += "?" + root.split("?", 1)[1]
        session = None
        if local_path_for_uri(root) is not None:
            try:
                session = kfp_launcher.store_session_info(root, self.launcher_config)
            except LauncherError as error:
                raise TaskFailed("driver", f"driver.RootDAG failed: {error}") from None
        tasks = spec["root"]["dag"]["tasks"]
        wanted = set(topological_tasks(spec))
        if until:
            wanted, pending = set(), [until]
            while pending:
                task = pending.pop()
                if task not in wanted:
                    wanted.add(task)
                    pending.extend(tasks[task].get("dependentTasks", []))
        produced: dict[str, dict[str, int]] = {}
        self.executor_inputs, self.states, self.output_parameters, self.pod_disk = {}, {}, {}, {}
        with ThreadPoolExecutor(max_workers=len(wanted) if self.parallel else 1) as pool:
            running: dict = {}
            failure = None
            while failure is None and (len(produced) < len(wanted) or running):
                for task in topological_tasks(spec):
                    ready = all(d in produced for d in tasks[task].get("dependentTasks", []))
                    if task in wanted and task not in produced and task not in running.values() and ready and \
                            (self.parallel or not running):
                        running[pool.submit(self._run_task, spec, task, produced, run_root, run_id, session,
                                            platform)] = task
                if not running:
                    break
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    task = running.pop(future)
                    if future.exception() is not None:
                        failure = failure or future.exception()
                    else:
                        produced[task] = future.result()
            for future in list(running):  # a failed task fails the run; what runs finishes (Argo)
                future.exception()
            if failure is not None:
                raise failure
        return {task: {key: self.runtime_artifact(i) for key, i in produced[task].items()}
                for task in topological_tasks(spec) if task in produced}

    def runtime_artifact(self, artifact_id: int) -> dict:
        """OutputArtifact.ToRuntimeArtifact: what a downstream task receives."""
        record = self.artifacts[artifact_id]
        return {"name": str(artifact_id), "type": {"instanceSchema": ""}, "uri": record["uri"],
                "metadata": {k: _from_mlmd_value(v) for k, v in record["custom_properties"].items()}}

    def _parameters(self, task_name: str, task: dict, component: dict) -> dict:
        """driver/driver.go resolveInputs: the values the driver resolves (no defaults yet)."""
        values = {}
        for name, source in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" in source:
                values[name] = self._image_path(source["runtimeValue"]["constant"])
            elif "componentInputParameter" in source:
                if source["componentInputParameter"] not in self.root_parameters:
                    raise TaskFailed(task_name, f"resolving input parameter {name}: parent DAG does not have input "
                                     f"parameter {source['componentInputParameter']}")
                values[name] = self._image_path(self.root_parameters[source["componentInputParameter"]])
            elif "taskOutputParameter" in source:
                producer = source["taskOutputParameter"]["producerTask"]
                key = source["taskOutputParameter"]["outputParameterKey"]
                if producer not in task.get("dependentTasks", []) or producer not in self.output_parameters:
                    raise TaskFailed(task_name, f"resolving input parameter {name}: cannot find producer task "
                                     f"{producer!r} (not in dependentTasks, so not run before this task)")
                if key not in self.output_parameters[producer]:
                    raise TaskFailed(task_name, f"resolving input parameter {name}: cannot find output parameter "
                                     f"key {key!r} in producer task {producer!r}")
                values[name] = self.output_parameters[producer][key]
            else:
                raise NotImplementedError(f"parameter source {source}")
        for name, declared in component.get("inputDefinitions", {}).get("parameters", {}).items():
            if name not in values:
                if not declared.get("isOptional") and "defaultValue" not in declared:
                    raise TaskFailed(task_name, f"neither value nor default value provided for non-optional "
                                     f"parameter {name!r}")
                continue
            try:
                values[name] = _check_parameter(name, values[name], declared["parameterType"])
            except TaskFailed as error:
                raise TaskFailed(task_name, str(error)) from None
        return values

    @staticmethod
    def _with_defaults(values: dict, component: dict) -> dict:
        """component/launcher_v2.go addDefaultParams: what the container sees."""
        values = dict(values)
        for name, declared in component.get("inputDefinitions", {}).get("parameters", {}).items():
            if name not in values and "defaultValue" in declared:
                values[name] = declared["defaultValue"]
        return values

    def _image_path(self, value):
        if isinstance(value, str):
            for old, new in self.image_paths.items():
                value = value.replace(old, new)
        return value

    def _run_task(self, spec: dict, task_name: str, produced: dict[str, dict[str, int]],
                  run_root: str, run_id: str, session: dict | None = None, platform: dict | None = None
                  ) -> dict[str, int]:
        task = spec["root"]["dag"]["tasks"][task_name]
        component = spec["components"][task["componentRef"]["name"]]
        container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
        inputs = {}
        for name, source in task.get("inputs", {}).get("artifacts", {}).items():
            upstream = source["taskOutputArtifact"]
            artifact_id = produced[upstream["producerTask"]][upstream["outputArtifactKey"]]
            inputs[name] = {"artifacts": [self.runtime_artifact(artifact_id)]}
        backend = self.backend
        # driver.go provisionOutputs: the task root, with a per-execution uuid from 2.4.0
        task_root = generate_output_uri(run_root, task_name, *([str(uuid.uuid4())] if backend.output_uri_salt else []))
        declared_outputs = dict(component.get("outputDefinitions", {}).get("artifacts", {}))
        if backend.executor_logs:  # added to every task, declared by none (publish_logs "true")
            declared_outputs[EXECUTOR_LOGS] = {"artifactType": {"schemaTitle": "system.Artifact"}}
        outputs = {}
        for key, declared in declared_outputs.items():
            artifact = {"type": declared["artifactType"], "uri": generate_output_uri(task_root, key)}
            if backend.task_root_outputs:
                artifact = {"name": key, **artifact}
            if "metadata" in declared:
                artifact["metadata"] = declared["metadata"]
            outputs[key] = {"artifacts": [artifact]}
            if local_path_for_uri(artifact["uri"]) is None and not self.allow_local_root:
                raise TaskFailed(task_name, f"failed to generate local storage path for output artifact "
                                 f"{key!r}: failed to generate local path for URI {artifact['uri']}: "
                                 "unsupported storage scheme")
        pod_root = tempfile.mkdtemp(prefix=f"pod-{task_name}-", dir=self.work_dir)
        pod_tmp = os.path.join(pod_root, "tmp")
        os.makedirs(pod_tmp)
        output_file = os.path.join(pod_tmp, os.path.relpath(OUTPUT_METADATA_FILEPATH, "/tmp"))
        if backend.task_root_outputs and local_path_for_uri(task_root):  # 2.15+: in the task root's local path
            output_file = pod_root + local_path_for_uri(task_root) + "/output_metadata.json"
        parameter_types = {name: declared["parameterType"] for name, declared in
                           component.get("outputDefinitions", {}).get("parameters", {}).items()}
        output_parameters = {name: {"outputFile": os.path.join(pod_tmp, os.path.relpath(OUTPUT_PARAMETERS_DIR, "/tmp"),
                                                               name)} for name in parameter_types}
        parameters = self._parameters(task_name, task, component)
        executor_input = {
            "inputs": {"parameterValues": parameters, "artifacts": inputs},
            "outputs": {"artifacts": outputs, "outputFile": output_file,
                        **({"parameters": output_parameters} if output_parameters else {})},
        }
        pipeline_name = spec["pipelineInfo"]["name"]
        fingerprint = ""
        if task.get("cachingOptions", {}).get("enableCache"):
            fingerprint = cache_fingerprint(executor_input, parameter_types, container)
            with self._lock:
                hits = [execution for key, name, execution in self.cache
                        if key == fingerprint and name == pipeline_name]
                if hits:
                    cached = self.executions[hits[-1]]
                    self.executions.append({**cached, "task": task_name, "run": run_id, "state": "CACHED"})
                    self.states[task_name] = "CACHED"
                    self.output_parameters[task_name] = dict(cached["parameters"])
                    return dict(cached["artifacts"])
        self.executor_inputs[task_name] = executor_input = {
            **executor_input, "inputs": {**executor_input["inputs"],
                                         "parameterValues": self._with_defaults(parameters, component)}}
        logs = executor_input["outputs"]["artifacts"].get(EXECUTOR_LOGS)
        if logs and backend.logs_retry_suffix:  # launcher_v2.go qualifyExecutorLogsForRetry: first attempt
            logs["artifacts"][0]["uri"] += "-0"
        os.makedirs(os.path.dirname(output_file), exist_ok=True)
        for declared in output_parameters.values():
            os.makedirs(os.path.dirname(declared["outputFile"]), exist_ok=True)
        for artifacts in executor_input["outputs"]["artifacts"].values():  # launcher_v2.go prepareOutputFolders
            local = local_path_for_uri(artifacts["artifacts"][0]["uri"])
            if local is not None:
                os.makedirs(os.path.dirname(pod_root + local), exist_ok=True)
        log_file = pod_root + local_path_for_uri(logs["artifacts"][0]["uri"]) if logs and local_path_for_uri(
            logs["artifacts"][0]["uri"]) else None  # launcher_v2.go getLogWriter: stdout tee'd there
        # Only now is there a pod (a cache hit creates none): its env, the scheduler's fit.
        pod_env = {**self.env, **self._pod_env(task_name, container,
                                               platform_config(platform, component["executorLabel"]))}
        pod = Pod(self.namespace, pod_env, self.secrets, self._dns(), backend)
        try:
            if session is not None:  # Execute: OpenBucket, then downloadArtifacts
                kfp_launcher.Bucket(kfp_launcher.BucketConfig.parse(run_root), session, pod)
                self.pod_disk[task_name] = kfp_launcher.download_inputs(executor_input, run_root, session, pod,
                                                                        pod_root)
            try:
                self._launch(task_name, container, executor_input, pod_tmp, pod_env, pod_root, log_file)
            except TaskFailed:
                if backend.logs_on_failure and session is not None and logs:  # uploaded and recorded anyway
                    only_logs = {**executor_input, "outputs": {**executor_input["outputs"],
                                                               "artifacts": {EXECUTOR_LOGS: logs}}}
                    self.failed_logs[task_name] = kfp_launcher.upload_outputs(
                        only_logs, {}, run_root, session, pod, pod_root)[EXECUTOR_LOGS]["uri"]
                raise
            reported = parse_executor_output(output_file)
            values = self._collect_output_parameters(task_name, executor_input, reported, parameter_types)
            if session is not None:
                merged = kfp_launcher.upload_outputs(executor_input, reported.get("artifacts", {}), run_root,
                                                     session, pod, pod_root)
            else:
                merged = self._merge_outputs(executor_input, reported.get("artifacts", {}))
        except LauncherError as error:
            raise TaskFailed(task_name, f"failed to execute component: {error}") from None
        with self._lock:
            recorded = self._record_outputs(task_name, executor_input, merged)
            self.executions.append({"task": task_name, "run": run_id, "state": "COMPLETE", "artifacts": recorded,
                                    "parameters": values})
            if fingerprint:
                self.cache.append((fingerprint, pipeline_name, len(self.executions) - 1))
            self.states[task_name] = "COMPLETE"
            self.output_parameters[task_name] = values
        return recorded

    # -- the pod ------------------------------------------------------------------------------
    def _dns(self) -> dict[str, str]:
        """Cluster DNS: ``<service>.kubeflow[.svc[.cluster.local]]:<port>`` -> the address this machine
        reaches ("" for a port of the Service that no server here plays)."""
        names = {}
        for service, ports in self.services.items():
            for _, port, address in ports:
                for name in (f"{service}.kubeflow:{port}", f"{service}.kubeflow.svc:{port}",
                             f"{service}.kubeflow.svc.cluster.local:{port}", *([address] if address else [])):
                    names[name] = address or ""
        return names

    def _pod_env(self, task_name: str, container: dict, config: dict) -> dict[str, str]:
        """driver.go initPodSpecPatch + extendPodSpecPatch, kubelet's env and the scheduler's fit."""
        env = {}
        if self.namespace == STANDALONE_NAMESPACE:  # Kubernetes' service links: Services of the pod's own namespace
            for service, ports in self.services.items():
                prefix = service.upper().replace("-", "_")
                for index, (port_name, _, address) in enumerate(ports):
                    host, port = (address or "127.0.0.1:1").rsplit(":", 1)
                    if index == 0:
                        env.update({f"{prefix}_SERVICE_HOST": host, f"{prefix}_SERVICE_PORT": port})
                    if port_name:
                        env[f"{prefix}_SERVICE_PORT_{port_name.upper().replace('-', '_')}"] = port
        env.update({item["name"]: item.get("value", "") for item in container.get("env", [])})
        for source in config.get("secretAsEnv", []):
            name = source["secretName"]
            for pair in source.get("keyToEnv", []):
                if name not in self.secrets:
                    raise TaskFailed(task_name, f"pod stays in CreateContainerConfigError: secret {name!r} not found "
                                     f"(namespace {self.namespace!r})")
                if pair["secretKey"] not in self.secrets[name]:
                    raise TaskFailed(task_name, f"pod stays in CreateContainerConfigError: couldn't find key "
                                     f"{pair['secretKey']} in Secret {self.namespace}/{name}")
                env[pair["envVar"]] = self.secrets[name][pair["secretKey"]]
        selector = (config.get("nodeSelector") or {}).get("labels") or {}
        if any(self.node_labels.get(k) != v for k, v in selector.items()):
            raise TaskFailed(task_name, "pod stays Pending: 0/1 nodes are available: 1 node(s) didn't match Pod's "
                             f"node affinity/selector {selector}")
        resources = container.get("resources", {})
        short = []
        if float(resources.get("cpuRequest", 0) or resources.get("cpuLimit", 0)) > float(self.node_allocatable["cpu"]):
            short.append("cpu")
        memory = resources.get("memoryRequest", 0) or resources.get("memoryLimit", 0)
        if float(memory) * 1e9 > _bytes(self.node_allocatable["memory"]):
            short.append("memory")
        accelerator = resources.get("accelerator") or {}
        if int(accelerator.get("count", 0) or 0) > int(self.node_allocatable.get(accelerator.get("type", ""), 0)):
            short.append(accelerator["type"])
        if short:
            raise TaskFailed(task_name, "pod stays Pending: 0/1 nodes are available: "
                             + ", ".join(f"1 Insufficient {what}" for what in short))
        return env

    @staticmethod
    def _collect_output_parameters(task_name: str, executor_input: dict, executor_output: dict,
                                   parameter_types: Mapping[str, str]) -> dict:
        reported = executor_output.get("parameterValues", {})
        values = {}
        for name, declared in executor_input["outputs"].get("parameters", {}).items():
            if name in reported:
                values[name] = reported[name]
                continue
            try:
                with open(declared["outputFile"]) as handle:
                    values[name] = _text_to_param(handle.read(), parameter_types[name])
            except (OSError, ValueError) as error:
                raise TaskFailed(task_name, f"failed to read output parameter name={name!r} "
                                 f"type={parameter_types[name]!r} path={declared['outputFile']!r}: {error}") from None
        return values

    # -- the launcher -------------------------------------------------------------------------
    def _launch(self, task_name: str, container: dict, executor_input: dict, pod_tmp: str,
                pod_env: Mapping[str, str], pod_root: str, log_file: str | None = None) -> None:
        placeholders = {"{{$}}": json.dumps(executor_input, separators=(",", ":"))}
        for name, value in executor_input["inputs"]["parameterValues"].items():
            placeholders[f"{{{{$.inputs.parameters['{name}']}}}}"] = (
                value if isinstance(value, str) else json.dumps(value))
        for name, artifacts in executor_input["outputs"]["artifacts"].items():
            placeholders[f"{{{{$.outputs.artifacts['{name}'].uri}}}}"] = artifacts["artifacts"][0]["uri"]
        for name, parameter in executor_input["outputs"].get("parameters", {}).items():
            placeholders[f"{{{{$.outputs.parameters['{name}'].output_file}}}}"] = parameter["outputFile"]

        def fill(text: str) -> str:
            for placeholder, value in placeholders.items():
                text = text.replace(placeholder, value)
            return text

        python = self.image_python or sys.executable
        command = [python if part == "python" else fill(part) for part in container["command"]]
        args = [fill(arg) for arg in container.get("args", [])]
        unresolved = [a for a in args if re.search(r"\{\{\$", a)]
        if unresolved:
            raise TaskFailed(task_name, f"placeholders this emulator does not resolve: {unresolved}")
        base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "S3_"))}  # not the dev shell's
        # The image's environment imports the installed project only: nothing of the dev venv or checkout.
        dns = cluster_dns(pod_root, self._dns())
        code = ({"PATH": f"{os.path.dirname(python)}:{base.get('PATH', '')}", "PYTHONPATH": dns} if self.image_python
                else {"PYTHONPATH": f"{dns}:{REPO}"})
        if self.image_python:
            base = {k: v for k, v in base.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        env = {**base, **dockerfile_env(), **pod_env, "TMPDIR": pod_tmp, **code,
               "KFP_POD_NAME": f"{task_name.lower()}-pod", "KFP_POD_UID": str(uuid.uuid4())}
        result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=self.timeout,
                                cwd=pod_tmp, env=env)
        if log_file:  # launcher_v2.go execute: the command's stdout and stderr into the log artifact's path
            with open(log_file, "w") as handle:
                handle.write(result.stdout + result.stderr)
        if result.returncode != 0:
            raise TaskFailed(task_name, f"exit status {result.returncode}\n{result.stderr[-6000:]}")

    @staticmethod
    def _merge_outputs(executor_input: dict, reported: Mapping[str, dict]) -> dict[str, dict]:
        """launcher_v2.go mergeRuntimeArtifacts, for a local root (nothing to upload)."""
        merged = {}
        for key, artifact_list in executor_input["outputs"]["artifacts"].items():
            artifact = dict(artifact_list["artifacts"][0])
            if reported.get(key, {}).get("artifacts"):
                source = reported[key]["artifacts"][0]
                artifact["uri"] = source.get("uri") or artifact["uri"]
                if source.get("metadata") is not None:
                    artifact["metadata"] = {**(artifact.get("metadata") or {}), **source["metadata"]}
            merged[key] = artifact
        return merged

    def _record_outputs(self, task_name: str, executor_input: dict, merged: Mapping[str, dict]) -> dict[str, int]:
        recorded = {}
        for key in executor_input["outputs"]["artifacts"]:
            artifact = merged[key]
            metadata = dict(artifact.get("metadata") or {})
            try:
                properties = {k: _to_mlmd_value(k, v) for k, v in metadata.items()}
            except TaskFailed as error:
                raise TaskFailed(task_name, str(error)) from None
            properties.setdefault("display_name", ("string", key))
            properties.setdefault("store_session_info", ("string", json.dumps(
                {"Provider": "minio", "Params": {"endpoint": "minio-service.kubeflow:9000"}})))
            schema = artifact["type"].get("instanceSchema") or "title: " + artifact["type"].get("schemaTitle", "")
            self.artifacts[self.next_id] = {"uri": artifact["uri"], "schema": schema,
                                            "custom_properties": properties}
            recorded[key] = self.next_id
            self.next_id += 1
        return recorded

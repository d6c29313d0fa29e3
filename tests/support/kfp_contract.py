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
command's ``python`` is this interpreter, its ENV lines are read from kubeflow/Dockerfile,
paths baked into the image are mapped by ``image_paths``); ``/tmp`` of the pod is a fresh
directory per task; a local-path root can be allowed (``allow_local_root``) so the tests
run without object storage, although a real launcher refuses it; one namespace (the cache
lookup's namespace predicate is always the same).
"""
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Mapping

KFP_BACKEND_TAG = "2.3.0"
DEFAULT_PIPELINE_ROOT = "minio://mlpipeline/v2/artifacts"      # config/env.go
OUTPUT_METADATA_FILEPATH = "/tmp/kfp_outputs/output_metadata.json"  # component/launcher_v2.go
OUTPUT_PARAMETERS_DIR = "/tmp/kfp/outputs"  # driver/driver.go provisionOutputs
LAUNCHER_SCHEMES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}  # localPathForURI
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


def local_path_for_uri(uri: str) -> str | None:
    for scheme, mount in LAUNCHER_SCHEMES.items():
        if uri.startswith(scheme):
            return mount + uri[len(scheme):]
    return None


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


def _from_mlmd_value(kind_value):
    """metadata/converter.go toRuntimeArtifact propertiesToMetadata."""
    kind, value = kind_value
    return float(value) if kind in ("int", "double") else value


class Cluster:
    """The MLMD store and object store of one KFP installation, across runs."""

    def __init__(self, work_dir: str, pipeline_root: str | None = None, allow_local_root: bool = False,
                 image_paths: Mapping[str, str] = (), env: Mapping[str, str] = (), timeout: int = 900):
        self.work_dir = work_dir
        self.pipeline_root = pipeline_root
        self.allow_local_root = allow_local_root
        self.image_paths = dict(image_paths)
        self.env = dict(env)
        self.timeout = timeout
        self.artifacts: dict[int, dict] = {}   # MLMD: id -> {uri, schema, custom_properties}
        self.next_id = 1
        self.executor_inputs: dict[str, dict] = {}  # last run: task -> the ExecutorInput it got
        self.executions: list[dict] = []  # MLMD executions: {task, run, state, artifacts, parameters}
        self.cache: list[tuple[str, str, int]] = []  # the API server's task cache: (key, pipeline, execution)
        self.states: dict[str, str] = {}  # last run: task -> COMPLETE or CACHED
        self.output_parameters: dict[str, dict] = {}  # last run: task -> its output parameters

    # -- the driver ---------------------------------------------------------------------------
    def run(self, spec: dict, run_id: str | None = None, runtime_root: str | None = None,
            until: str | None = None) -> dict[str, dict[str, dict]]:
        """One run: every task in dependency order; returns task -> output key -> MLMD artifact."""
        run_id = run_id or str(uuid.uuid4())
        root = runtime_root or self.pipeline_root or DEFAULT_PIPELINE_ROOT
        run_root = generate_output_uri(root, spec["pipelineInfo"]["name"], run_id)
        produced: dict[str, dict[str, int]] = {}
        self.executor_inputs, self.states, self.output_parameters = {}, {}, {}
        for task_name in topological_tasks(spec):
            produced[task_name] = self._run_task(spec, task_name, produced, run_root, run_id)
            if task_name == until:
                break
        return {task: {key: self.runtime_artifact(i) for key, i in outputs.items()}
                for task, outputs in produced.items()}

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
                  run_root: str, run_id: str) -> dict[str, int]:
        task = spec["root"]["dag"]["tasks"][task_name]
        component = spec["components"][task["componentRef"]["name"]]
        container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]
        inputs = {}
        for name, source in task.get("inputs", {}).get("artifacts", {}).items():
            upstream = source["taskOutputArtifact"]
            artifact_id = produced[upstream["producerTask"]][upstream["outputArtifactKey"]]
            inputs[name] = {"artifacts": [self.runtime_artifact(artifact_id)]}
        outputs = {}
        for key, declared in component.get("outputDefinitions", {}).get("artifacts", {}).items():
            artifact = {"type": declared["artifactType"], "uri": generate_output_uri(run_root, task_name, key)}
            if "metadata" in declared:
                artifact["metadata"] = declared["metadata"]
            outputs[key] = {"artifacts": [artifact]}
            if local_path_for_uri(artifact["uri"]) is None and not self.allow_local_root:
                raise TaskFailed(task_name, f"failed to generate local storage path for output artifact "
                                 f"{key!r}: failed to generate local path for URI {artifact['uri']}: "
                                 "unsupported storage scheme")
        pod_tmp = tempfile.mkdtemp(prefix=f"pod-{task_name}-", dir=self.work_dir)
        output_file = os.path.join(pod_tmp, os.path.relpath(OUTPUT_METADATA_FILEPATH, "/tmp"))
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
            hits = [execution for key, name, execution in self.cache if key == fingerprint and name == pipeline_name]
            if hits:
                cached = self.executions[hits[-1]]
                self.executions.append({**cached, "task": task_name, "run": run_id, "state": "CACHED"})
                self.states[task_name] = "CACHED"
                self.output_parameters[task_name] = dict(cached["parameters"])
                return dict(cached["artifacts"])
        self.executor_inputs[task_name] = executor_input = {
            **executor_input, "inputs": {**executor_input["inputs"],
                                         "parameterValues": self._with_defaults(parameters, component)}}
        os.makedirs(os.path.dirname(output_file), exist_ok=True)
        for declared in output_parameters.values():
            os.makedirs(os.path.dirname(declared["outputFile"]), exist_ok=True)
        self._launch(task_name, container, executor_input, pod_tmp)
        recorded = self._record_outputs(executor_input, output_file)
        values = self._collect_output_parameters(task_name, executor_input, output_file, parameter_types)
        self.executions.append({"task": task_name, "run": run_id, "state": "COMPLETE", "artifacts": recorded,
                                "parameters": values})
        if fingerprint:
            self.cache.append((fingerprint, pipeline_name, len(self.executions) - 1))
        self.states[task_name] = "COMPLETE"
        self.output_parameters[task_name] = values
        return recorded

    @staticmethod
    def _collect_output_parameters(task_name: str, executor_input: dict, output_file: str,
                                   parameter_types: Mapping[str, str]) -> dict:
        reported = {}
        if os.path.exists(output_file):
            with open(output_file) as handle:
                reported = json.load(handle).get("parameterValues", {})
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
    def _launch(self, task_name: str, container: dict, executor_input: dict, pod_tmp: str) -> None:
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

        command = [sys.executable if part == "python" else fill(part) for part in container["command"]]
        args = [fill(arg) for arg in container.get("args", [])]
        unresolved = [a for a in args if re.search(r"\{\{\$", a)]
        if unresolved:
            raise TaskFailed(task_name, f"placeholders this emulator does not resolve: {unresolved}")
        env = {**os.environ, **dockerfile_env(), **self.env, "TMPDIR": pod_tmp,
               "PYTHONPATH": REPO, "KFP_POD_NAME": f"{task_name.lower()}-pod", "KFP_POD_UID": str(uuid.uuid4())}
        result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=self.timeout,
                                cwd=pod_tmp, env=env)
        if result.returncode != 0:
            raise TaskFailed(task_name, f"exit status {result.returncode}\n{result.stderr[-6000:]}")

    def _record_outputs(self, executor_input: dict, output_file: str) -> dict[str, int]:
        reported = {}
        if os.path.exists(output_file):
            with open(output_file) as handle:
                reported = json.load(handle).get("artifacts", {})
        recorded = {}
        for key, artifact_list in executor_input["outputs"]["artifacts"].items():
            artifact = dict(artifact_list["artifacts"][0])
            metadata = dict(artifact.get("metadata") or {})
            if reported.get(key, {}).get("artifacts"):
                source = reported[key]["artifacts"][0]
                artifact["uri"] = source.get("uri") or artifact["uri"]
                metadata.update(source.get("metadata") or {})
            properties = {k: _to_mlmd_value(k, v) for k, v in metadata.items()}
            properties.setdefault("display_name", ("string", key))
            properties.setdefault("store_session_info", ("string", json.dumps(
                {"Provider": "minio", "Params": {"endpoint": "minio-service.kubeflow:9000"}})))
            schema = artifact["type"].get("instanceSchema") or "title: " + artifact["type"].get("schemaTitle", "")
            self.artifacts[self.next_id] = {"uri": artifact["uri"], "schema": schema,
                                            "custom_properties": properties}
            recorded[key] = self.next_id
            self.next_id += 1
        return recorded

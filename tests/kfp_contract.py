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

Deviations, each because there is no cluster here: the image is this checkout (its
command's ``python`` is this interpreter, its ENV lines are read from kubeflow/Dockerfile,
paths baked into the image are mapped by ``image_paths``); ``/tmp`` of the pod is a fresh
directory per task; a local-path root can be allowed (``allow_local_root``) so the tests
run without object storage, although a real launcher refuses it; KFP's cache is not
emulated (each run here is a run with caching off).
"""
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
LAUNCHER_SCHEMES = {"gs://": "/gcs/", "minio://": "/minio/", "s3://": "/s3/"}  # localPathForURI
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


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

    # -- the driver ---------------------------------------------------------------------------
    def run(self, spec: dict, run_id: str | None = None, runtime_root: str | None = None,
            until: str | None = None) -> dict[str, dict[str, dict]]:
        """One run: every task in dependency order; returns task -> output key -> MLMD artifact."""
        run_id = run_id or str(uuid.uuid4())
        root = runtime_root or self.pipeline_root or DEFAULT_PIPELINE_ROOT
        run_root = generate_output_uri(root, spec["pipelineInfo"]["name"], run_id)
        produced: dict[str, dict[str, int]] = {}
        self.executor_inputs = {}
        for task_name in topological_tasks(spec):
            produced[task_name] = self._run_task(spec, task_name, produced, run_root)
            if task_name == until:
                break
        return {task: {key: self.runtime_artifact(i) for key, i in outputs.items()}
                for task, outputs in produced.items()}

    def runtime_artifact(self, artifact_id: int) -> dict:
        """OutputArtifact.ToRuntimeArtifact: what a downstream task receives."""
        record = self.artifacts[artifact_id]
        return {"name": str(artifact_id), "type": {"instanceSchema": ""}, "uri": record["uri"],
                "metadata": {k: _from_mlmd_value(v) for k, v in record["custom_properties"].items()}}

    def _parameters(self, task: dict, component: dict) -> dict:
        values = {}
        for name, source in task.get("inputs", {}).get("parameters", {}).items():
            if "runtimeValue" not in source:
                raise NotImplementedError(f"parameter source {source} (TFX compiles constants only)")
            values[name] = self._image_path(source["runtimeValue"]["constant"])
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
                  run_root: str) -> dict[str, int]:
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
        executor_input = {
            "inputs": {"parameterValues": self._parameters(task, component), "artifacts": inputs},
            "outputs": {"artifacts": outputs, "outputFile": output_file},
        }
        self.executor_inputs[task_name] = executor_input
        os.makedirs(os.path.dirname(output_file), exist_ok=True)
        self._launch(task_name, container, executor_input, pod_tmp)
        return self._record_outputs(executor_input, output_file)

    # -- the launcher -------------------------------------------------------------------------
    def _launch(self, task_name: str, container: dict, executor_input: dict, pod_tmp: str) -> None:
        placeholders = {"{{$}}": json.dumps(executor_input, separators=(",", ":"))}
        for name, value in executor_input["inputs"]["parameterValues"].items():
            placeholders[f"{{{{$.inputs.parameters['{name}']}}}}"] = (
                value if isinstance(value, str) else json.dumps(value))
        for name, artifacts in executor_input["outputs"]["artifacts"].items():
            placeholders[f"{{{{$.outputs.artifacts['{name}'].uri}}}}"] = artifacts["artifacts"][0]["uri"]

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

"""Run a compiled KFP v2 pipeline's container steps locally, the way a KFP backend would.

No Kubernetes cluster exists here, so this plays the backend's part only: walk the DAG in
dependency order, build each task's ExecutorInput from the compiled spec (parameter
constants, upstream output artifacts with the metadata they reported), substitute it for
``{{$}}`` in the container's args, and run the container's own command (TFX's
``kubeflow_v2_run_executor`` entrypoint) in a subprocess with local output URIs.
"""
import json
import os
import subprocess
import sys
from typing import Dict, List, Mapping, Optional

_ARTIFACT_COUNTER = [0]


def topological_tasks(spec: dict) -> List[str]:
    tasks = spec["root"]["dag"]["tasks"]
    done: List[str] = []
    while len(done) < len(tasks):
        ready = sorted(t for t, body in tasks.items()
                       if t not in done and all(d in done for d in body.get("dependentTasks", [])))
        if not ready:
            raise ValueError("cycle in the compiled DAG")
        done.extend(ready)
    return done


def _artifact(uri: str, schema: str, metadata: Optional[dict] = None) -> dict:
    _ARTIFACT_COUNTER[0] += 1
    return {"uri": uri, "name": f"local/artifacts/{_ARTIFACT_COUNTER[0]}",
            "type": {"instanceSchema": schema}, "metadata": metadata or {}}


def run_task(spec: dict, task_name: str, produced: Dict[str, Dict[str, dict]], work_dir: str,
             substitutions: Mapping[str, str] = (), timeout: int = 900) -> Dict[str, dict]:
    """Run one task through its container command; returns its output artifacts by key."""
    substitutions = dict(substitutions)
    task = spec["root"]["dag"]["tasks"][task_name]
    component = spec["components"][task["componentRef"]["name"]]
    container = spec["deploymentSpec"]["executors"][component["executorLabel"]]["container"]

    def substitute(value):
        if isinstance(value, str):
            for old, new in substitutions.items():
                value = value.replace(old, new)
        return value

    parameters = {name: substitute(p["runtimeValue"]["constant"])
                  for name, p in task.get("inputs", {}).get("parameters", {}).items()}
    inputs = {}
    for name, source in task.get("inputs", {}).get("artifacts", {}).items():
        upstream = source["taskOutputArtifact"]
        inputs[name] = {"artifacts": [produced[upstream["producerTask"]][upstream["outputArtifactKey"]]]}
    task_dir = os.path.join(work_dir, task_name)
    outputs = {key: {"artifacts": [_artifact(os.path.join(task_dir, key), d["artifactType"]["instanceSchema"])]}
               for key, d in component.get("outputDefinitions", {}).get("artifacts", {}).items()}
    executor_input = {
        "inputs": {"parameterValues": parameters, "artifacts": inputs},
        "outputs": {"artifacts": outputs, "outputFile": os.path.join(task_dir, "executor_output.json")},
    }
    args = [json.dumps(executor_input) if a == "{{$}}" else substitute(a) for a in container["args"]]
    command = [sys.executable if part == "python" else part for part in container["command"]]
    result = subprocess.run([*command, *args], capture_output=True, text=True, timeout=timeout)
    if result.returncode != 0:
        raise RuntimeError(f"{task_name} failed (exit {result.returncode}):\n{result.stderr[-4000:]}")
    with open(executor_input["outputs"]["outputFile"]) as handle:
        reported = json.load(handle).get("artifacts", {})
    artifacts = {}
    for key, declared in outputs.items():
        artifact = dict(declared["artifacts"][0])
        if key in reported:  # the executor reports updated metadata (e.g. split names)
            artifact["metadata"] = reported[key]["artifacts"][0].get("metadata", {})
        artifacts[key] = artifact
    return artifacts


def run_pipeline(spec: dict, work_dir: str, substitutions: Mapping[str, str] = (),
                 until: Optional[str] = None) -> Dict[str, Dict[str, dict]]:
    """Run every task (or those up to ``until``) in dependency order."""
    produced: Dict[str, Dict[str, dict]] = {}
    for task_name in topological_tasks(spec):
        produced[task_name] = run_task(spec, task_name, produced, work_dir, substitutions)
        if task_name == until:
            break
    return produced

"""Work-arounds for upstream TFX / KFP gaps on an open-source KFP 2.x cluster, one per function.

Each names the upstream issue or source line it works around and has a test in
tests/test_kubeflow_compat.py that runs the upstream code path and asserts it still fails:
when an upgrade fixes upstream, that test fails and says which work-around to delete.
(Hooks into private TF/TFX/kfp APIs outside Kubeflow live in ``stackenv/compat.py``.)
"""
import json
from typing import Any, Dict, List, Mapping, Optional

# TFX's V2 container entrypoint; ours (pipeline/kubeflow_entrypoint.py) wraps it.
TFX_ENTRYPOINT_MODULE = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
INVOCATION_FLAG = "--json_serialized_invocation_args"
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


def _flag_value(argv: List[str], flag: str) -> Optional[int]:
    """Index of the value of ``flag`` in ``argv`` (``--flag value`` or ``--flag=value``)."""
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            return index + 1
        if arg.startswith(flag + "="):
            return index
    return None


def _get(argv: List[str], index: int, flag: str) -> str:
    value = argv[index]
    return value[len(flag) + 1:] if value.startswith(flag + "=") else value


def _set(argv: List[str], index: int, flag: str, value: str) -> None:
    argv[index] = f"{flag}={value}" if argv[index].startswith(flag + "=") else value


def restore_artifact_types(executor_input: Dict[str, Any], inputs_spec: Mapping[str, Any]) -> List[str]:
    """Give upstream input artifacts back the type the compiled component declares.

    tensorflow/tfx#7768 (open for TFX 1.16 + KFP 2.x): KFP's driver passes an artifact produced
    by an upstream task with ``type: {instanceSchema: ""}`` (kubeflow/pipelines backend
    ``src/v2/metadata/client.go`` GetOutputArtifactsByExecutionId: ``Schema: "" // TODO``), and
    TFX's entrypoint (``kubeflow_v2_entrypoint_utils._retrieve_class_path``) then fails with
    ``AttributeError: 'NoneType' object has no attribute 'get'``. The compiled spec already
    carries each input's type in the component's inputDefinitions, which TFX passes to the
    container as ``--json_serialized_inputs_spec_args``; this copies it into the artifacts
    whose type is empty. Returns the input names it restored (in place).
    """
    declared = inputs_spec.get("artifacts", {})
    restored = []
    for name, artifact_list in executor_input.get("inputs", {}).get("artifacts", {}).items():
        for artifact in artifact_list.get("artifacts", []):
            kind = artifact.get("type") or {}
            if kind.get("schemaTitle") or (kind.get("instanceSchema") or "").strip():
                continue
            if name not in declared:
                raise ValueError(
                    f"Input artifact {name!r} arrived without a type (KFP passes an empty instanceSchema for "
                    f"upstream artifacts, tensorflow/tfx#7768) and the compiled component declares no input "
                    f"of that name (it declares {sorted(declared)}): recompile the pipeline with this image's "
                    "version of the project.")
            artifact["type"] = dict(declared[name]["artifactType"])
            restored.append(name)
    return restored


def restore_artifact_types_in_argv(argv: List[str]) -> List[str]:
    """``restore_artifact_types`` applied to the container arguments; returns the new argv."""
    argv = list(argv)
    invocation_at = _flag_value(argv, INVOCATION_FLAG)
    spec_at = _flag_value(argv, INPUTS_SPEC_FLAG)
    if invocation_at is None or spec_at is None:
        return argv
    executor_input = json.loads(_get(argv, invocation_at, INVOCATION_FLAG))
    inputs_spec = json.loads(_get(argv, spec_at, INPUTS_SPEC_FLAG))
    if restore_artifact_types(executor_input, inputs_spec):
        _set(argv, invocation_at, INVOCATION_FLAG, json.dumps(executor_input))
    return argv


def with_default_pipeline_root(pipeline_job: Dict[str, Any], pipeline_root: str) -> Dict[str, Any]:
    """The PipelineSpec to write, with the pipeline root recorded in it.

    TFX 1.16's ``KubeflowV2DagRunner`` keeps the root only in the PipelineJob's
    ``runtimeConfig.gcsOutputDirectory`` and drops ``runtimeConfig`` when it writes YAML
    (``kubeflow_v2_dag_runner._write_pipeline_spec_to_file`` dumps ``pipelineSpec`` alone), so
    a KFP run of the package falls back to ``minio://mlpipeline/v2/artifacts`` (backend
    ``src/v2/config/env.go`` defaultPipelineRoot), which TFX cannot write. The spec field
    ``defaultPipelineRoot`` is where kfp's own compiler records it; ``deploy`` reads it back
    and passes it as the run's ``runtime_config.pipeline_root`` (the KFP 2.3 API server reads
    only that: backend ``src/apiserver/template/template.go`` modelToPipelineJobRuntimeConfig).
    """
    spec = dict(pipeline_job["pipelineSpec"])
    spec["defaultPipelineRoot"] = pipeline_root
    return spec

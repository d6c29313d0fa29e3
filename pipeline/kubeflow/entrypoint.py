"""The container command of every compiled step: TFX's V2 entrypoint, after the KFP fixes.

``pipeline/kubeflow/compile.py`` sets it as the V2 runner's ``default_commands``, so a KFP
pod runs ``python -m pipeline.kubeflow.entrypoint <TFX's own arguments>``. It applies the
work-arounds of ``stackenv/compat.py`` to the arguments the KFP launcher passes
(``{{$}}`` replaced by the ExecutorInput JSON), drops the outputs KFP's launcher manages
itself (``executor-logs`` from backend 2.5.0, ``stackenv/compat.py``), registers the
filesystems the step's URIs need (pipeline/kubeflow/storage.py), and then runs TFX's
``kubeflow_v2_run_executor`` exactly as ``python -m`` would, so TFX's flag parsing, executor
dispatch and ExecutorOutput writing stay untouched.

On KFP's bundled object store (a ``minio://`` root) TFX works on ``s3://`` forms of the
URIs at the store's endpoint, after one bounded listing shows the store answers and takes the
step's keys, and the ExecutorOutput gets the original URIs back (pipeline/kubeflow/bundled_store.py
says why).

For the ExampleGen it also applies what the input-resolution step found
(pipeline/kubeflow/fresh_data.py) as TFX's ExampleGen driver would have: the resolved
``input_config``, ``span``, ``version`` and ``input_fingerprint`` arrive as input parameters,
so TFX's entrypoint already makes them execution properties; ``version`` is dropped when the
pattern has none (the driver's None), and the output Examples artifact gets the span, version
and fingerprint the driver records on it (``driver.update_output_artifact``).

Then the run's own values: runtime parameters set at run creation go into the execution
properties they belong to (pipeline/kubeflow/runtime_parameters.py), and a Trainer whose
warm-start step found no served model gets no ``base_model`` (pipeline/kubeflow/warm_start_step.py).
"""
import json
import os
import runpy
import sys

import stackenv
from stackenv.compat import (
    INVOCATION_FLAG,
    TFX_ENTRYPOINT_MODULE,
    direct_runner_without_prism,
    drop_launcher_managed_outputs,
    exit_skipping_teardown,
    restore_artifact_types_in_argv,
    single_deletes_where_batch_is_denied,
    skip_tfx_sdist_for_local_beam,
)
from stackenv.errors import EXIT_USER_ERROR, ProjectError

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.bundled_store import SCHEME
from pipeline.kubeflow.resolve_input import NO_VERSION
from pipeline.kubeflow.runtime_parameters import apply_to_executor_input
from pipeline.kubeflow.storage import register_filesystems
from pipeline.kubeflow.warm_start_step import drop_missing_base_model

COMMAND = ["python", "-m", "pipeline.kubeflow.entrypoint"]
#: A folder whose sitecustomize gives the processes a step starts (Beam's workers) the step's work-arounds.
WORKER_SITE = os.path.join(os.path.dirname(os.path.abspath(stackenv.__file__)), "beam_worker_site")


def apply_resolved_input(executor_input: dict) -> bool:
    """Apply the input-resolution step's parameters in ``executor_input`` (in place); False if none."""
    parameters = executor_input.get("inputs", {}).get("parameterValues", {})
    if "input_fingerprint" not in parameters or "span" not in parameters:
        return False
    recorded = {"span": int(parameters["span"]), "input_fingerprint": parameters["input_fingerprint"]}
    if parameters.get("version") is not None and int(parameters["version"]) != NO_VERSION:
        recorded["version"] = int(parameters["version"])
    else:
        parameters.pop("version", None)
    for artifact in executor_input.get("outputs", {}).get("artifacts", {}).get("examples", {}).get("artifacts", []):
        artifact["metadata"] = {**(artifact.get("metadata") or {}), **recorded}
    return True


def apply_run_settings(executor_input: dict) -> bool:
    """The run's own values before TFX reads ``executor_input`` (in place); False if nothing changed:
    runtime parameters set at run creation (pipeline/kubeflow/runtime_parameters.py), and the
    warm-start step's "nothing to start from" (pipeline/kubeflow/warm_start_step.py)."""
    applied = bool(apply_to_executor_input(executor_input))
    return drop_missing_base_model(executor_input) or applied


def _rewrite_executor_input(args: list[str]) -> tuple[list[str], dict | None]:
    """Apply the resolved input, the run's settings and the bundled store's URIs; returns (args, the
    ExecutorInput as the launcher passed it, or None when the arguments carry none)."""
    args = list(args)
    for at, arg in enumerate(args):
        inline = arg.startswith(INVOCATION_FLAG + "=")
        if (arg == INVOCATION_FLAG and at + 1 < len(args)) or inline:
            at, text = (at, arg[len(INVOCATION_FLAG) + 1:]) if inline else (at + 1, args[at + 1])
            original = json.loads(text)
            executor_input = json.loads(text)
            changed = bool(drop_launcher_managed_outputs(executor_input))  # KFP 2.5+: executor-logs
            changed = apply_resolved_input(executor_input) or changed
            changed = apply_run_settings(executor_input) or changed
            if bundled_store.uses_bundled_store(text):
                url = bundled_store.configure_environment()
                bundled_store.check_access(url, executor_input)
                executor_input, changed = bundled_store.to_readable(executor_input), changed or SCHEME in text
            if changed:
                text = json.dumps(executor_input)
                args[at] = f"{INVOCATION_FLAG}={text}" if inline else text
            return args, original
    return args, None


def main(argv: list[str] | None = None) -> int:
    args = restore_artifact_types_in_argv(sys.argv[1:] if argv is None else argv)
    try:
        args, executor_input = _rewrite_executor_input(args)
    except ProjectError as error:  # a runtime parameter out of range, the bundled store unreachable: one paragraph
        print(f"error: {error.paragraph}", file=sys.stderr)
        return error.exit_code or EXIT_USER_ERROR
    register_filesystems(" ".join(args))
    if "s3://" in " ".join(args):  # Beam's S3 batch deletes on SeaweedFS profile keys, here and in Beam's workers
        single_deletes_where_batch_is_denied()
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (WORKER_SITE, os.environ.get("PYTHONPATH"))))
    sys.argv = [TFX_ENTRYPOINT_MODULE, *args]
    skip_tfx_sdist_for_local_beam()  # the image has TFX: no sdist of it per Beam step
    direct_runner_without_prism()  # no Prism binary fetched from GitHub inside the cluster
    try:
        runpy.run_module(TFX_ENTRYPOINT_MODULE, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as done:  # absl's app.run ends with sys.exit
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    if code == 0 and executor_input and SCHEME in json.dumps(executor_input):
        bundled_store.restore_output_uris(executor_input["outputs"]["outputFile"], executor_input)
    return code


if __name__ == "__main__":
    exit_skipping_teardown(main())

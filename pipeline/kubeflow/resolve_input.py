"""The container command of the compiled pipeline's input-resolution step (Kubeflow only).

Why a step of its own: on open-source KFP nothing runs the ExampleGen's TFX driver (the
compiled ``lifecycle.preCacheCheck`` hook is read only by Vertex AI), so the ExampleGen's
KFP cache key would be its parameters alone, the data URI: new files at the same URI would
be served from KFP's cache. This step runs before the ExampleGen with caching off, lists the
input exactly as the local driver does (``components.ingest_driver.resolve_input``: TFX's
span resolution and fingerprint plus the whole-tree fingerprint), and returns the results as
output parameters, which the ExampleGen takes as inputs (pipeline/kubeflow/fresh_data.py); so
the ExampleGen's cache key, and everything downstream of it, changes exactly when the data does.

KFP's launcher passes the ExecutorInput as ``--executor_input`` (``{{$}}``) and reads the output
parameters from the ExecutorOutput written to ``outputs.outputFile`` (kubeflow/pipelines
backend ``src/v2/component/launcher_v2.go`` getExecutorOutputFile, collectOutputParameters).
Bad input (no span matches, an unreadable URI) is one paragraph on stderr and exit code 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import stackenv  # noqa: F401 - the TF/TFX environment first
from stackenv.compat import exit_skipping_teardown
from stackenv.errors import EXIT_USER_ERROR, ProjectError

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.storage import register_filesystems

COMMAND = ["python", "-m", "pipeline.kubeflow.resolve_input"]
ARGS = ["--executor_input", "{{$}}"]
#: The step's outputs: name -> KFP parameter type (the ExampleGen's extra inputs).
OUTPUTS = {"input_config": "STRING", "input_fingerprint": "STRING", "span": "NUMBER_INTEGER",
           "version": "NUMBER_INTEGER"}
#: ``version`` when the pattern has no ``{VERSION}`` (TFX's driver leaves it None; a KFP
#: output parameter must have a value).
NO_VERSION = -1
#: The ExampleGen parameters this step reads (the others do not affect what is read).
INPUTS = ("input_base", "input_config", "range_config")


def resolve(parameters: dict) -> dict:
    """The output parameter values for the ExampleGen parameters ``parameters``."""
    from tfx.types import standard_component_specs as keys

    from components.ingest_driver import resolve_input

    resolved = resolve_input({k: v for k, v in parameters.items() if k in INPUTS and v not in (None, "")})
    version = resolved.get("version")
    return {"input_config": resolved[keys.INPUT_CONFIG_KEY], "input_fingerprint": resolved["input_fingerprint"],
            "span": int(resolved["span"]), "version": NO_VERSION if version is None else int(version)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pipeline.kubeflow.resolve_input", allow_abbrev=False)
    parser.add_argument("--executor_input", required=True)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    executor_input = json.loads(args.executor_input)
    parameters = executor_input.get("inputs", {}).get("parameterValues", {})
    try:
        if bundled_store.uses_bundled_store(""):
            bundled_store.configure_environment()
        register_filesystems(str(parameters.get("input_base", "")))
        values = resolve(parameters)
    except ProjectError as error:
        print(f"error: {error.paragraph}", file=sys.stderr)
        return error.exit_code or EXIT_USER_ERROR
    output_file = executor_input["outputs"]["outputFile"]
    os.makedirs(os.path.dirname(output_file), exist_ok=True)
    with open(output_file, "w") as handle:
        json.dump({"parameterValues": values}, handle)
    print(f"Resolved input {parameters.get('input_base')}: span {values['span']}, "
          f"fingerprint {values['input_fingerprint']!r}")
    return 0


if __name__ == "__main__":
    exit_skipping_teardown(main())

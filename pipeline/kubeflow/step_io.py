"""The ExecutorInput in and the ExecutorOutput out of this project's own (non-TFX) container steps.

KFP's launcher passes the ExecutorInput as ``{{$}}`` and reads what a step reports from the file
named in ``outputs.outputFile`` (backend 2.3.0 ``src/v2/component/launcher_v2.go``
getExecutorOutputFile, mergeRuntimeArtifacts). On KFP's bundled store (a ``minio://`` root) the
step works on the ``s3://`` forms of the URIs and reports the original ones back, as the TFX
steps' entrypoint does (pipeline/kubeflow/bundled_store.py). Used by the report and warm-start
steps (pipeline/kubeflow/report_step.py, warm_start_step.py).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from stackenv.errors import EXIT_USER_ERROR, ProjectError

from pipeline.kubeflow import bundled_store
from pipeline.kubeflow.storage import register_filesystems


def run_step(run: Callable[[dict], dict], description: str, argv: list[str] | None = None) -> int:
    """Parse ``--executor-input``, call ``run(executor_input) -> ExecutorOutput``, write that file."""
    parser = argparse.ArgumentParser(description=description, allow_abbrev=False)
    parser.add_argument("--executor-input", required=True, help="KFP's ExecutorInput JSON ({{$}})")
    text = parser.parse_args(sys.argv[1:] if argv is None else argv).executor_input
    original = json.loads(text)
    executor_input = json.loads(text)
    try:
        if bundled_store.uses_bundled_store(text):
            bundled_store.configure_environment()
            executor_input = bundled_store.to_readable(executor_input)
        register_filesystems(json.dumps(executor_input))
        executor_output = run(executor_input)
    except ProjectError as error:
        print(f"error: {error.paragraph}", file=sys.stderr)
        return error.exit_code or EXIT_USER_ERROR
    output_file = original["outputs"]["outputFile"]
    os.makedirs(os.path.dirname(output_file), exist_ok=True)
    with open(output_file, "w") as handle:
        json.dump(executor_output, handle)
    if bundled_store.SCHEME in text:
        bundled_store.restore_output_uris(output_file, original)
    return 0

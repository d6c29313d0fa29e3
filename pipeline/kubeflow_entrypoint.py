"""The container command of every compiled step: TFX's V2 entrypoint, after the KFP fixes.

``pipeline/kubeflow_runner.py`` sets it as the V2 runner's ``default_commands``, so a KFP
pod runs ``python -m pipeline.kubeflow_entrypoint <TFX's own arguments>``. It applies the
work-arounds of ``stackenv/compat.py`` to the arguments the KFP launcher passes
(``{{$}}`` replaced by the ExecutorInput JSON), registers the filesystems the step's URIs
need (pipeline/kubeflow_storage.py), and then runs TFX's ``kubeflow_v2_run_executor``
exactly as ``python -m`` would, so TFX's flag parsing, executor dispatch and ExecutorOutput
writing stay untouched.
"""
import os
import runpy
import sys

from stackenv.compat import TFX_ENTRYPOINT_MODULE, restore_artifact_types_in_argv

from pipeline.kubeflow_storage import register_filesystems

COMMAND = ["python", "-m", "pipeline.kubeflow_entrypoint"]


def main(argv: list[str] | None = None) -> int:
    args = restore_artifact_types_in_argv(sys.argv[1:] if argv is None else argv)
    register_filesystems(" ".join(args))
    sys.argv = [TFX_ENTRYPOINT_MODULE, *args]
    try:
        runpy.run_module(TFX_ENTRYPOINT_MODULE, run_name="__main__", alter_sys=True)
    except SystemExit as done:  # absl's app.run ends with sys.exit
        return done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    return 0


if __name__ == "__main__":
    code = main()
    # The step's outputs and ExecutorOutput are written; skip interpreter teardown, where
    # tensorflow-io's S3 client aborts ("pure virtual method called", exit 134) and would
    # fail a finished step.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

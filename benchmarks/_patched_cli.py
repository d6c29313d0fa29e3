"""``python -m pipeline ...`` with some of the measured speed fixes reverted (bench_pipeline --fix-ab).

The project's defaults carry every fix; this undoes the ones named in ``BENCH_REVERT``
(comma list) in-process, so each fix's end-to-end effect is measured side by side with
the real CLI in one benchmark run:

- ``tf_keras_autograph``: AutoGraph converts tf_keras again, as TF 2.16 does by default
  (the fix: models/common/autograph.py, applied by TrainingSettings.fit).
- ``tfx_v1_import``: the run imports ``tfx.v1`` (and with it google.cloud.aiplatform), as
  graph.py did with ``from tfx import v1 as tfx`` (the fix: direct component imports).
- ``transform_statistics``: Transform computes pre-/post-transform statistics, TFX's
  default (the fix: ``disable_statistics`` unless ``--transform-statistics``).
- ``interpreter_exit``: the process ends with a normal interpreter shutdown (the fix:
  ``pipeline.cli.exit_process``).

    BENCH_REVERT=tf_keras_autograph .venv/bin/python benchmarks/_patched_cli.py run --model cnn --output /tmp/x
"""
import os
import runpy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

REVERTS = {f for f in os.environ.get("BENCH_REVERT", "").split(",") if f}
KNOWN = {"tf_keras_autograph", "tfx_v1_import", "transform_statistics", "interpreter_exit"}
if REVERTS - KNOWN:
    raise SystemExit(f"unknown BENCH_REVERT {sorted(REVERTS - KNOWN)}; known: {sorted(KNOWN)}")

import stackenv  # noqa: E402,F401

if "tf_keras_autograph" in REVERTS:
    from models.common import autograph  # noqa: E402

    real_convert = autograph.convert_tf_keras
    autograph.convert_tf_keras = lambda convert: real_convert(True)

if "tfx_v1_import" in REVERTS:
    from tfx import v1  # noqa: E402,F401

if "transform_statistics" in REVERTS and sys.argv[1:2] == ["run"]:
    sys.argv.append("--transform-statistics")

if "interpreter_exit" in REVERTS:
    from pipeline import cli  # noqa: E402

    cli.exit_process = sys.exit

sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)

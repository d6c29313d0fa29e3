"""``python -m pipeline ...`` with candidate speed fixes applied in-process (bench_pipeline --fix-ab).

The fixes are emulated here, without touching pipeline/ or models/, so their end-to-end
effect can be measured side by side with the unchanged CLI before anyone edits the code.
``BENCH_FIXES`` (comma list) picks them:

- ``tf_keras_autograph``: AutoGraph skips ``tf_keras`` (as TF does for ``keras``); the
  real fix is the same two lines after TensorFlow is imported, e.g. in models/common.
- ``tfx_v1_shim``: ``tfx.v1`` is replaced by a namespace of the directly imported classes
  graph.py uses; the real fix is ``from tfx.components import ...`` etc. in graph.py,
  which skips tfx.v1.extensions (google.cloud.aiplatform).
- ``transform_no_stats``: ``Transform(disable_statistics=True)``: no pre-/post-transform
  statistics (StatisticsGen already computed the input's); the real fix is that argument
  in graph.py.

    BENCH_FIXES=tf_keras_autograph .venv/bin/python benchmarks/_patched_cli.py run --model cnn --output /tmp/x
"""
import os
import runpy
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(1, str(ROOT / "benchmarks"))

FIXES = {f for f in os.environ.get("BENCH_FIXES", "").split(",") if f}
KNOWN = {"tf_keras_autograph", "tfx_v1_shim", "transform_no_stats"}
if FIXES - KNOWN:
    raise SystemExit(f"unknown BENCH_FIXES {sorted(FIXES - KNOWN)}; known: {sorted(KNOWN)}")

import stackenv  # noqa: E402,F401

if "tfx_v1_shim" in FIXES:
    import tfx  # noqa: E402
    from tfx.components import (ExampleValidator, ImportExampleGen, SchemaGen,  # noqa: E402
                                StatisticsGen, Trainer, Transform)
    from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen  # noqa: E402
    from tfx.orchestration.pipeline import Pipeline  # noqa: E402
    from tfx.proto import trainer_pb2  # noqa: E402

    shim = types.ModuleType("tfx.v1")
    shim.components = types.SimpleNamespace(
        ImportExampleGen=ImportExampleGen, StatisticsGen=StatisticsGen, SchemaGen=SchemaGen,
        ImportSchemaGen=ImportSchemaGen, ExampleValidator=ExampleValidator, Transform=Transform,
        Trainer=Trainer)
    shim.dsl = types.SimpleNamespace(Pipeline=Pipeline)
    shim.proto = types.SimpleNamespace(TrainArgs=trainer_pb2.TrainArgs, EvalArgs=trainer_pb2.EvalArgs)
    sys.modules["tfx.v1"] = shim
    tfx.v1 = shim

if "transform_no_stats" in FIXES:
    import functools  # noqa: E402

    from tfx.components.transform import component as transform_component  # noqa: E402

    real_init = transform_component.Transform.__init__

    @functools.wraps(real_init)
    def init(self, *args, **kwargs):
        kwargs.setdefault("disable_statistics", True)
        real_init(self, *args, **kwargs)

    transform_component.Transform.__init__ = init

if "tf_keras_autograph" in FIXES:
    import tensorflow  # noqa: E402,F401  (a run imports it anyway)

    import _common  # noqa: E402

    _common.skip_autograph_for_tf_keras()

sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__", alter_sys=True)

"""Your own images, measured side by side in one run: the digits and the real image sets of
benchmarks/image_sets.py (glyphs from font packages, Adwaita icons), each through the
default pipeline (cold: fresh output dir), the CNN next to every reference predictor the
Trainer scored on the same eval split, and from scratch vs on a base model pretrained on
ANOTHER set (``--base-model``), with the wall time of each run.

The base model for set B is a feature extractor trained here on set A (the CNN's own
architecture, [0, 1] pixels in, the flattened last conv block out), saved as a plain
SavedModel: the way a user would bring a module of their own.

    python benchmarks/bench_images.py                       # digits, glyphs, icons + 1 transfer pair
    python benchmarks/bench_images.py --sets digits --no-transfer   # the cold default digits run only
"""
from __future__ import annotations

import json
import shlex
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402
import bench_quality as Q  # noqa: E402

NAME = "bench_images"
IMAGE_SIZE = 32  # the pipeline's default for image folders


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--sets", default="digits,glyphs,icons")
    p.add_argument("--transfer", default="glyphs>icons",
                   help="comma-separated A>B pairs: pretrain on A, train on B with --base-model")
    p.add_argument("--no-transfer", action="store_true")
    p.add_argument("--run-args", default="", help="extra `pipeline run` arguments for every run")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/images")
    p.add_argument("--extractor-steps", type=int, default=600)
    args = p.parse_args(argv)
    if args.quick:  # smoke: the digits only, a few steps, no transfer (numbers are not meaningful)
        args.sets, args.no_transfer = "digits", True
        args.run_args = args.run_args or "--train-steps 20"
    return args


def run_pipeline(name: str, data, work: Path, extra=()):
    out = work / "runs" / name
    shutil.rmtree(out, ignore_errors=True)
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--output", str(out), *(["--data", str(data)] if data else []),
           *extra]
    C.log(f"running {C.shell_command(cmd)}")
    res = C.run_timed(cmd, timeout=3600, log_path=work / f"{name}.log")
    if res["returncode"] != 0:
        return {"name": name, "error": res["stderr"][-1500:], "wall_s": res["wall_s"]}
    pipeline_name, run, store = Q.latest_run(out)
    metrics = Q.overall_metrics(Q.uri(run, "Evaluator", "evaluation"))
    from pipeline.results import gate_summary

    extras = gate_summary.read_model_extras(Q.uri(run, "Trainer", "model"))
    blessing = run["Evaluator"].outputs["blessing"][0]
    return {
        "name": name, "command": C.shell_command(cmd), "wall_s": res["wall_s"],
        "trainer_s": Q.training_seconds(store, pipeline_name),
        "accuracy": metrics.get("sparse_categorical_accuracy"),
        "balanced_accuracy": metrics.get("balanced_accuracy"), "macro_f1": metrics.get("macro_f1"),
        "references": (extras.get("references") or {}).get("references"),
        "training": {k: v for k, v in (extras.get("training") or {}).items() if k != "hparams"},
        "blessed": bool(blessing.custom_properties["blessed"].int_value),
        "summary": res["stdout"][-2500:],
    }


def train_extractor(folder: Path, out_dir: Path, steps: int) -> str:
    """A feature extractor pretrained on ``folder``: images [b, 32, 32, 3] in [0, 1] -> features."""
    import cnn_fastloop as F
    import numpy as np
    import tensorflow as tf

    from models.cnn import features
    from models.cnn.hparams import CnnHyperparameters
    from models.cnn.model import build_cnn
    from models.common import regime

    x, y, _ = F.load_folder(folder, IMAGE_SIZE)
    flat = x.reshape(len(x), -1).astype(np.float32) / 255.0
    hp = CnnHyperparameters()
    shape = (IMAGE_SIZE, IMAGE_SIZE, 3)
    model, report = regime.fit_with_holdout(
        lambda: build_cnn(shape, int(y.max()) + 1, 1e-3, hp), {features.IMAGE_XF: flat}, y, batch_size=64,
        min_steps=steps, max_steps=steps, patience_steps=hp.patience_steps, holdout_fraction=0.15,
        class_weights="off", num_classes=int(y.max()) + 1, seed=0)
    flatten = next(layer for layer in model.layers if isinstance(layer, tf.keras.layers.Flatten))
    body = tf.keras.Model(model.input, flatten.output)
    images = tf.keras.Input(shape, name="images")
    extractor = tf.keras.Model(images, body(tf.keras.layers.Reshape((int(np.prod(shape)),))(images)))
    tf.saved_model.save(extractor, str(out_dir))
    C.log(f"extractor from {folder.name}: held-out accuracy {report.holdout_accuracy:.4f} -> {out_dir}")
    return str(out_dir)


def main(argv=None):
    args = parse_args(argv)
    import image_sets

    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    names = [s for s in args.sets.split(",") if s]
    folders = [n for n in names if n != "digits"]
    started = time.monotonic()
    info = image_sets.build(work / "sets", folders) if folders else {}
    extra = shlex.split(args.run_args)
    results = []
    for name in names:
        results.append(run_pipeline(name, None if name == "digits" else work / "sets" / name, work, extra))
        C.log(json.dumps({k: v for k, v in results[-1].items() if k != "summary"}))
    if not args.no_transfer:
        for pair in (p for p in args.transfer.split(",") if p):
            source, target = pair.split(">")
            for needed in (source, target):
                if not (work / "sets" / needed).is_dir():
                    image_sets.build(work / "sets", [needed])
            extractor = train_extractor(work / "sets" / source, work / f"extractor-{source}", args.extractor_steps)
            results.append(run_pipeline(f"{target}-from-{source}", work / "sets" / target, work,
                                        [*extra, "--base-model", extractor]))
            C.log(json.dumps({k: v for k, v in results[-1].items() if k != "summary"}))
    rows = []
    for r in results:
        refs = r.get("references") or {}
        rows.append([r["name"], C.fmt(r.get("accuracy"), 4), C.fmt(r.get("balanced_accuracy"), 4),
                     C.fmt(refs.get("majority"), 4), C.fmt(refs.get("logistic_regression"), 4),
                     C.fmt(refs.get("svm_rbf"), 4), "yes" if r.get("blessed") else "no",
                     C.fmt(r.get("trainer_s"), 1), C.fmt(r.get("wall_s"), 1)])
    C.print_table(["run", "CNN acc", "CNN bal.acc", "majority", "logreg", "svm_rbf", "blessed", "Trainer s",
                   "wall s"], rows, title="Your own images (cold default runs)")
    payload = {"benchmark": NAME, "quick": args.quick, "machine": C.machine_info(), "sets": info,
               "results": results, "total_s": round(time.monotonic() - started, 1),
               "loadavg_end": C.loadavg()}
    path = C.result_path(NAME, args.json_out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    C.log(f"results: {path}")


if __name__ == "__main__":
    main()

"""SavedModel vs its TFLite models (float16, int8): size, latency per example at batch 1,
accuracy and agreement on the bundled digits' eval split.

The TFLite files are the ones the Pusher wrote beside the pushed version
(``tflite/model_<quantization>.tflite``, components/tflite_export.py); the SavedModel runs
its ``predict_image`` signature in process (``tf.saved_model.load``), the TFLite models run
the same signature in TensorFlow's own interpreter (``tf.lite.Interpreter``). Latency is
one example per call, interleaved per round (order rotated), median per example; a phone's
numbers differ, the ratios are what this measures. Accuracy and agreement use every
example of the run's eval split (the ExampleGen's output), not a sample.

``--output DIR``: a pipeline output dir whose newest cnn version has TFLite files; without
it, a default digits run (``--gate-margin -1``: pushed whatever the reference says) trains
one in ``--work-dir``.

    .venv/bin/python benchmarks/tflite.py --output output
    .venv/bin/python benchmarks/tflite.py --quick
"""
from __future__ import annotations

import glob
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "tflite"
SIGNATURE = "predict_image"


def parse_args(argv=None):
    parser = C.base_parser(__doc__)
    parser.add_argument("--output", default=None, help="a pipeline output dir with a pushed cnn version")
    parser.add_argument("--work-dir", default=None, help="where to train one without --output (default: a temp dir)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 7; quick 2)")
    parser.add_argument("--calls", type=int, default=None, help="batch-1 calls per variant and round (default 200)")
    return parser.parse_args(argv)


def train(work: Path, quick: bool) -> Path:
    out = work / "cnn"
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", "cnn", "--output", str(out), "--gate-margin", "-1",
           *(["--train-steps", "60"] if quick else [])]
    C.log(f"no --output: training one: {C.shell_command(cmd)}")
    result = C.run_timed(cmd, timeout=1800, log_path=work / "cnn-train.log")
    if result["returncode"] != 0:
        raise SystemExit(f"pipeline run failed: {result['stderr'][-2000:]}")
    return out


def newest(paths):
    return max(paths, key=lambda p: int(os.path.basename(p))) if paths else None


def eval_split(output: Path, tf, np):
    """Pixels and label ids of the newest ExampleGen output's eval split."""
    examples = newest(glob.glob(str(output / "tfx" / "*" / "*ExampleGen" / "examples" / "*")))
    if examples is None:
        raise SystemExit(f"No ExampleGen output under {output}/tfx")
    files = sorted(glob.glob(os.path.join(examples, "Split-eval", "*")))
    rows = [tf.train.Example.FromString(r) for r in tf.data.TFRecordDataset(files, "GZIP").as_numpy_iterator()]
    images = np.array([r.features.feature["image"].int64_list.value for r in rows], np.float32)
    labels = np.array([r.features.feature["label_id"].int64_list.value[0] for r in rows])
    return images, labels


def main(argv=None) -> None:
    args = parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 7)
    calls = args.calls or (20 if args.quick else 200)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    output = Path(args.output) if args.output else train(Path(args.work_dir or tempfile.mkdtemp(prefix="bench-tflite-")),
                                                         args.quick)
    version = newest(glob.glob(str(output / "serving" / "cnn" / "[0-9]*")))
    if version is None:
        raise SystemExit(f"No pushed cnn version under {output}/serving/cnn")

    import stackenv  # noqa: F401  (before TensorFlow: TF_USE_LEGACY_KERAS)

    import numpy as np
    import tensorflow as tf

    from components.tflite_export import saved_model_bytes
    from models.common.tflite import QUANTIZATIONS, interpreter
    from pipeline.results.tflite_summary import size_text

    signature = tf.saved_model.load(version).signatures[SIGNATURE]
    shape = [int(v) for v in signature.structured_input_signature[1]["images"].shape[1:]]
    images, labels = eval_split(output, tf, np)
    images = images.reshape(-1, *shape)
    paths = {q: os.path.join(version, "tflite", f"model_{q}.tflite") for q in QUANTIZATIONS}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise SystemExit(f"{version} lacks {missing}: the Pusher did not write them (push_info.json says why)")
    runners = {q: interpreter(p).get_signature_runner(SIGNATURE) for q, p in paths.items()}

    def saved_model(x):
        return signature(images=tf.constant(x))["probabilities"].numpy()

    predict = {"saved_model": saved_model,
               **{q: (lambda x, r=runners[q]: r(images=x)["probabilities"]) for q in QUANTIZATIONS}}
    classes = {name: np.concatenate([fn(images[i:i + 1]) for i in range(len(images))]).argmax(-1)
               for name, fn in predict.items()}
    singles = [images[i:i + 1] for i in range(calls)]

    def timed(fn):
        return lambda: [fn(x) for x in singles]

    samples = C.interleave({name: timed(fn) for name, fn in predict.items()}, rounds=rounds, warmup=1)
    sizes = {"saved_model": saved_model_bytes(version), **{q: os.path.getsize(p) for q, p in paths.items()}}
    results = {}
    base_ms = C.median(samples["saved_model"]) / calls * 1000
    for name in predict:
        ms = C.median(samples[name]) / calls * 1000
        results[name] = {"bytes": sizes[name], "latency_ms_per_example": ms, "latency_vs_saved_model": ms / base_ms,
                         "accuracy": float(np.mean(classes[name] == labels)),
                         "agreement_with_saved_model": float(np.mean(classes[name] == classes["saved_model"]))}
    C.print_table(["model", "size", "ms/example (batch 1)", "vs SavedModel", "accuracy", "agreement"],
                  [[name, size_text(r["bytes"]), C.fmt(r["latency_ms_per_example"]), C.fmt(r["latency_vs_saved_model"]),
                    f"{r['accuracy']:.4f}", f"{r['agreement_with_saved_model']:.4f}"] for name, r in results.items()],
                  title=f"{version}: {len(labels)} eval examples, {rounds} rounds x {calls} calls")
    C.write_json(NAME, {"version_dir": version, "eval_examples": int(len(labels)), "rounds": rounds, "calls": calls,
                        "results": results}, args, machine)


if __name__ == "__main__":
    main()

"""Loading a seq2seq export: saved with Keras's per-layer traces (as before) vs without (the project).

Every seq2seq Evaluator, ``predict``, ``generate``, the report and TF Serving start by loading
the export, and ``tf.saved_model.load`` rebuilds every function the SavedModel holds. A Keras
model saved with ``tf.saved_model.save`` holds its signatures and also each layer's traced call
functions, which nothing here loads back (``models/common/signatures.save_serving_model``).

One model is built on a run's Transform output (its vocabulary and token windows), with the
n-gram tables fitted on the run's transformed train windows, as the Trainer attaches them. It
is exported twice with the same weights, and each export is loaded ``--rounds`` times in a
fresh process, interleaved. Printed: seconds per load, the functions in each ``saved_model.pb``,
and the largest difference between the two exports' ``serving_default`` outputs on the run's
eval windows (0 when the change kept the served model the same).

    python -m pipeline run --model seq2seq --output /tmp/run-s2s      # any seq2seq run
    python benchmarks/bench_export_load.py --run /tmp/run-s2s --rounds 3
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_export_load"
VARIANTS = ("with Keras layer traces (before)", "signatures only (project)")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--run", required=False, help="output folder of a seq2seq `pipeline run`")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--examples", type=int, default=256, help="eval windows compared between the exports")
    p.add_argument("--load", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def _latest(pattern: str) -> str:
    return C.latest_numbered(pattern, "give --run the output folder of a seq2seq `pipeline run`")


def export_both(run: str, folder: str) -> dict[str, str]:
    """The same model exported both ways; {variant: export dir}."""
    import stackenv  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)

    import tensorflow as tf
    import tensorflow_transform as tft

    from models.common import signatures
    from models.seq2seq import baselines, blend, export, features
    from models.seq2seq.model import build_seq2seq

    root = os.path.join(run, "tfx", "seq2seq-pipeline", "Transform")
    tf_transform_output = tft.TFTransformOutput(_latest(os.path.join(root, "transform_graph", "*")))
    examples = _latest(os.path.join(root, "transformed_examples", "*"))
    train_files, eval_files = (glob.glob(os.path.join(examples, f"Split-{split}", "*")) for split in ("train", "eval"))
    vocab_size = tf_transform_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
    spec = tf_transform_output.transformed_feature_spec()
    context_tokens, target_tokens = spec[features.CONTEXT_XF].shape[0], spec[features.TARGET_XF].shape[0]
    model = build_seq2seq(vocab_size, context_tokens, target_tokens, 1e-3)
    # The served counts as the Trainer fits them (models/seq2seq/trainer.py _references).
    _, counts, _, _ = baselines.fit_kneser_ney_reference(train_files, eval_files, vocab_size, context_tokens,
                                                          target_tokens)
    model.ngram = counts.served()
    model.blend_weights = tf.Variable([1.0 / len(blend.COMPONENTS)] * len(blend.COMPONENTS), trainable=False,
                                      name="blend_weights")
    saving = signatures.save_serving_model
    targets = {}
    for variant in VARIANTS:
        target = os.path.join(folder, str(len(targets)))
        if variant == VARIANTS[0]:
            signatures.save_serving_model = lambda m, d, s: tf.saved_model.save(m, d, signatures=s)
        try:
            export.export_serving_model(model, tf_transform_output, target)
        finally:
            signatures.save_serving_model = saving
        targets[variant] = target
    return targets


def _functions(export_dir: str) -> int:
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(Path(export_dir, "saved_model.pb").read_bytes())
    return len(proto.meta_graphs[0].graph_def.library.function)


def load_child(export_dir: str) -> float:
    import stackenv  # noqa: F401

    import tensorflow as tf

    started = time.perf_counter()
    tf.saved_model.load(export_dir)
    return time.perf_counter() - started


def largest_difference(exports: dict[str, str], run: str, count: int) -> float:
    import tensorflow as tf

    examples_dir = _latest(os.path.join(run, "tfx", "seq2seq-pipeline", "ImportExampleGen", "examples", "*"))
    files = glob.glob(os.path.join(examples_dir, "Split-eval", "*"))
    batch = [record.numpy() for record in tf.data.TFRecordDataset(files, "GZIP").take(count)]
    outputs = [tf.saved_model.load(path).signatures["serving_default"](examples=tf.constant(batch))["probabilities"]
               for path in exports.values()]
    return float(tf.reduce_max(tf.abs(outputs[0] - outputs[1])))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.load is not None:
        print(json.dumps(load_child(args.load)))
        return 0
    if not args.run:
        raise SystemExit("--run is required")
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    contention = C.Contention()
    rounds = 1 if args.quick else args.rounds
    with tempfile.TemporaryDirectory(prefix="export-load-") as folder:
        exports = export_both(args.run, folder)

        def variant(path: str):
            def run() -> float:
                out = subprocess.run([C.PYTHON, __file__, "--load", path], capture_output=True, text=True,
                                     check=True, timeout=1800)
                return float(out.stdout.strip().splitlines()[-1])
            return run

        samples = C.interleave({name: variant(path) for name, path in exports.items()}, rounds, warmup=0)
        functions = {name: _functions(path) for name, path in exports.items()}
        difference = largest_difference(exports, args.run, args.examples)
    base = C.median(samples[VARIANTS[0]])
    C.print_table(["export", "functions in saved_model.pb", "seconds per load (median)", "ratio to before"],
                  [(name, functions[name], C.median(s), C.ratio(C.median(s), base)) for name, s in samples.items()],
                  title=f"Loading one seq2seq export, {rounds} fresh processes each")
    print(f"Largest |difference| of serving_default probabilities on {args.examples} eval windows: {difference:.3g}")
    C.write_json(NAME, {"samples_s": samples, "functions": functions, "max_abs_difference": difference},
                 args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

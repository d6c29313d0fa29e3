"""Peak memory of the text Trainer's count model against train windows: ``COUNT_FACTOR`` of
``models/seq2seq/memory.py``.

The network's memory follows its batch (``memory_factors.py``); the count model's follows the corpus. The
Trainer reads every train window into memory and cross-fits Kneser-Ney models of several orders over
them (``baselines.fit_kneser_ney_reference``), so its peak grows with the train windows. Each measurement
here is a fresh process that imports the stack, notes its peak RSS, then runs that fit on the first part
of a real run's transformed train records and notes the peak again; the growth between two parts, over the
windows between them, is what a train window costs.

    python benchmarks/debian_text_folder.py /tmp/docs1m --documents 3000 --words 1000000
    python -m pipeline run --model seq2seq --data /tmp/docs1m --output /tmp/m1m
    python benchmarks/text_count_memory.py /tmp/m1m      # a few minutes (two processes)
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys

import _common as C

ROOT = C.PROJECT_ROOT

_FIT = r"""
import json, resource, sys
import stackenv  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)
import tensorflow_transform as tft
from models.seq2seq import baselines, features
import tempfile
import tensorflow as tf
graph, train, evals, share = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), float(sys.argv[4])
if share < 1:  # the first part of the train records, streamed into a file of its own
    records = tf.data.TFRecordDataset(train, compression_type="GZIP")
    total = int(records.reduce(0, lambda n, _: n + 1))
    part = tempfile.NamedTemporaryFile(suffix=".gz", delete=False).name
    with tf.io.TFRecordWriter(part, options="GZIP") as writer:
        for record in records.take(int(total * share)):
            writer.write(record.numpy())
    train = [part]
output = tft.TFTransformOutput(graph)
spec = output.transformed_feature_spec()
vocab = output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
fit = baselines.fit_kneser_ney_reference(train, evals, vocab, spec[features.CONTEXT_XF].shape[0],
                                         spec[features.TARGET_XF].shape[0])
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"before": before, "after": after, "windows": int(len(fit.text_order)),
                  "context": int(spec[features.CONTEXT_XF].shape[0]), "target": int(spec[features.TARGET_XF].shape[0])}))
"""


def measure(graph: str, train: list[str], evals: list[str], share: float) -> dict:
    out = subprocess.run([sys.executable, "-c", _FIT, graph, json.dumps(train), json.dumps(evals), str(share)], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if out.returncode:
        sys.exit(out.stderr[-3000:])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="--output of a finished (or past-Transform) text run")
    parser.add_argument("--small", type=float, default=0.25, help="share of the train records in the smaller fit")
    args = parser.parse_args()
    machine = C.machine_info()
    transform = f"{args.output}/tfx/seq2seq-pipeline/Transform"
    hint = "pass the --output of a finished (or past-Transform) text run"
    graph = C.latest_numbered(f"{transform}/transform_graph/*", hint)
    examples = C.latest_numbered(f"{transform}/transformed_examples/*", hint)
    train = sorted(glob.glob(f"{examples}/Split-train/*"))
    evals = sorted(glob.glob(f"{examples}/Split-eval/*"))
    small = measure(graph, train, evals, args.small)
    large = measure(graph, train, evals, 1.0)
    rows = [("part", small), ("all", large)]
    for name, row in rows:
        print(f"{name:5} {row['windows']:>10,} train windows ({row['context']}+{row['target']} tokens): "
              f"imports {row['before'] / 2**20:,.0f} MiB, peak {row['after'] / 2**20:,.0f} MiB, "
              f"growth {(row['after'] - row['before']) / 2**20:,.0f} MiB")
    per_window = (large["after"] - small["after"]) / max(1, large["windows"] - small["windows"])
    print(f"growth per train window between the two: {per_window:,.0f} bytes")
    C.write_json("text_count_memory", {"small": small, "large": large, "bytes_per_window": per_window,
                                       "output": args.output}, args, machine)


if __name__ == "__main__":
    main()

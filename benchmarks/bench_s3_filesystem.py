"""TensorFlow's s3:// through the project's plugin (stackenv/s3_filesystem) beside tensorflow-io's.

A Kubeflow step on an S3-compatible store reads and writes its artifacts through tf.io.gfile: on
tfx-1.16 with tensorflow-io, on tfx-1.21 with the project's plugin (tensorflow-io has no build
there). This measures what a step does most, against one local S3 server (moto's, from PyPI):
records written and read back through tf.data, and a SavedModel saved and loaded, after the
client's start (the first operation, once per process). Each variant
runs in a fresh process per round, rounds interleaved; the times exclude TensorFlow's import.
On tfx-1.16 both variants run and the ratio is plugin / tensorflow-io; on tfx-1.21 the plugin alone.

    .venv/bin/python benchmarks/bench_s3_filesystem.py [--rounds 3] [--megabytes 32]
"""
from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import uuid

import _common

sys.path.insert(0, str(_common.PROJECT_ROOT / "tests"))

BUCKET = "bench"
PHASES = ("first operation", "write records", "read records", "save SavedModel", "load SavedModel")

_CHILD = r"""
import json, os, sys, time
import stackenv
import tensorflow as tf

variant, root, megabytes = sys.argv[1], sys.argv[2], int(sys.argv[3])
if variant == "tensorflow-io":
    import tensorflow_io  # noqa: F401 - registers s3://
else:
    from stackenv import s3_filesystem
    s3_filesystem.register()
times, record = {}, os.urandom(16 * 1024)
started = time.perf_counter()
tf.io.gfile.exists(root + "/nothing-yet")  # the client's start (the plugin's: boto3 loading its models)
times["first operation"] = time.perf_counter() - started
started = time.perf_counter()
with tf.io.TFRecordWriter(root + "/records/part-0.tfrecord") as writer:
    for _ in range(megabytes * 64):
        writer.write(record)
times["write records"] = time.perf_counter() - started
started = time.perf_counter()
count = sum(1 for _ in tf.data.TFRecordDataset(root + "/records/part-0.tfrecord", buffer_size=1 << 20))
times["read records"] = time.perf_counter() - started
assert count == megabytes * 64, count
model = tf.keras.Sequential([tf.keras.Input((512,)), tf.keras.layers.Dense(1024), tf.keras.layers.Dense(512)])
started = time.perf_counter()
tf.saved_model.save(model, root + "/model")
times["save SavedModel"] = time.perf_counter() - started
started = time.perf_counter()
tf.saved_model.load(root + "/model")
times["load SavedModel"] = time.perf_counter() - started
print(json.dumps(times), flush=True)
os._exit(0)
"""


def _run(variant: str, address: str, megabytes: int) -> dict[str, float]:
    from support.s3_server import process_env

    env = process_env(f"http://{address}")
    root = f"s3://{BUCKET}/{variant.replace(' ', '-')}-{uuid.uuid4().hex[:8]}"
    done = subprocess.run([sys.executable, "-c", _CHILD, variant, root, str(megabytes)], env=env,
                          capture_output=True, text=True, timeout=1800, cwd=_common.PROJECT_ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = _common.base_parser(__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--megabytes", type=int, default=32, help="size of the records file written and read")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.megabytes = 1, 4
    machine = _common.machine_info()
    _common.print_header("bench_s3_filesystem", machine, args.quick)
    import logging

    from support.s3_server import s3_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's server: a line per request otherwise

    variants = ["project plugin"]
    if importlib.util.find_spec("tensorflow_io") is not None:
        variants.insert(0, "tensorflow-io")
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with s3_server(BUCKET) as address:
        for round_index in range(args.rounds):
            for name in _common.rotated(variants, round_index):
                samples[name].append(_run(name, address, args.megabytes))
                _common.log(f"round {round_index + 1}, {name}: " + ", ".join(
                    f"{phase} {seconds:.2f} s" for phase, seconds in samples[name][-1].items()))
    medians = {name: {phase: _common.median([s[phase] for s in runs]) for phase in PHASES}
               for name, runs in samples.items()}
    rows = []
    for phase in PHASES:
        row = [phase, *(medians[name][phase] for name in variants)]
        if len(variants) == 2:
            row.append(_common.paired_ratio([s[phase] for s in samples[variants[1]]],
                                            [s[phase] for s in samples[variants[0]]]))
        rows.append(row)
    headers = ["phase (median s)", *variants, *(["plugin / tensorflow-io (paired)"] if len(variants) == 2 else [])]
    _common.print_table(headers, rows, title=f"{args.megabytes} MB of records and a 1M-parameter SavedModel "
                                             f"against moto's S3 server, {args.rounds} interleaved rounds")
    _common.write_json("bench_s3_filesystem", {"samples": samples, "medians": medians}, args, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())

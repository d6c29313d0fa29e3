"""Scale-out modes side by side, one run: training workers, Beam worker pool, tf.data service.

1. **Training workers**: the CNN (``models.cnn.model.build_cnn``) fitted on the digits
   (transformed as the pipeline does: pixels / 16, as GZIP TFRecords read by
   ``make_dataset``) under ``MultiWorkerMirroredStrategy`` with 1 worker vs 2 worker
   processes on this machine (``TF_CONFIG`` on localhost ports, the project's
   ``make_strategy("multi_worker")``). Same per-replica batch, so 2 workers process twice
   the examples per step. Reported: steps/s and examples/s of the chief's fit, and the
   wall time of the whole job (process start to all exited).
2. **Beam**: ``python -m pipeline run --train-steps 1`` on the bundled digits with the
   DirectRunner vs ``PortableRunner`` (embedded job server) with an external worker pool
   from ``python -m pipeline beam-pool``; whole-process wall time and the Beam components'
   seconds from MLMD; the record counts in = out are checked by the run itself.
3. **tf.data service**: ``make_dataset`` in process vs through a local dispatcher + worker
   (``data_service="auto"``): batches/s of iterating, and steps/s of the CNN's fit.

Variants are interleaved per round (order rotated); ratios of medians. On a 2-core machine
expect the scale-out variants to be SLOWER: their point is more machines, and here they
share the same cores with extra processes and gRPC hops.

    .venv/bin/python benchmarks/bench_scale.py            # ~15 min on 2 cores
    .venv/bin/python benchmarks/bench_scale.py --quick    # smoke: 1 round, tiny sizes
    .venv/bin/python benchmarks/bench_scale.py --only train,service
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_scale"
SECTIONS = ("train", "beam", "service")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--steps", type=int, default=None, help="training steps per fit")
    p.add_argument("--batch", type=int, default=32, help="per-replica batch")
    p.add_argument("--work-dir", default=None)
    p.add_argument("--worker", default=None, help=argparse_hidden())
    return p.parse_args(argv)


def argparse_hidden():
    import argparse

    return argparse.SUPPRESS


# ------------------------------------------------------------------------------ data


def write_digits(directory: Path) -> str:
    """The digits as the CNN's transformed features (image_xf floats, label_xf ids)."""
    import stackenv  # noqa: F401

    import tensorflow as tf
    from sklearn.datasets import load_digits

    path = directory / "digits-xf.gz"
    if path.exists():
        return str(path)
    digits = load_digits()
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for x, y in zip(digits.data / 16.0, digits.target):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image_xf": tf.train.Feature(float_list=tf.train.FloatList(value=x.reshape(-1))),
                "label_xf": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(y)])),
            })).SerializeToString())
    return str(path)


SPEC_ARGS = {"image_xf": ([64], "float32"), "label_xf": ([], "int64")}


def _spec():
    import tensorflow as tf

    return {k: tf.io.FixedLenFeature(shape, getattr(tf, dtype)) for k, (shape, dtype) in SPEC_ARGS.items()}


def _fit(dataset, steps: int, strategy=None):
    """(seconds of fit after a 2-step warm-up fit, steps) for the CNN on ``dataset``."""
    import tensorflow as tf

    from models.cnn.model import build_cnn

    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = build_cnn((8, 8, 1), 10)
    model.fit(dataset, epochs=1, steps_per_epoch=2, verbose=0)  # trace + first steps
    started = time.perf_counter()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0)
    return time.perf_counter() - started


# --------------------------------------------------------------------- 1. train workers


def worker_main(spec_json: str) -> None:
    """One worker of the training section (this script re-run with --worker)."""
    import stackenv  # noqa: F401

    from models.common.autograph import convert_tf_keras
    from models.common.distribution import make_strategy
    from models.common.inputs import make_dataset

    spec = json.loads(spec_json)
    strategy = make_strategy("multi_worker")
    convert_tf_keras(False)
    global_batch = spec["batch"] * strategy.num_replicas_in_sync
    data = make_dataset(spec["file"], _spec(), "label_xf", global_batch, seed=0, memory_budget_bytes=0)
    seconds = _fit(data, spec["steps"], strategy)
    print(json.dumps({"fit_s": seconds, "replicas": strategy.num_replicas_in_sync,
                      "global_batch": global_batch}), flush=True)


def _free_ports(count: int):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def run_workers(workers: int, file: str, steps: int, batch: int) -> dict:
    cluster = {"worker": [f"localhost:{p}" for p in _free_ports(workers)]}
    spec = json.dumps({"file": file, "steps": steps, "batch": batch})
    started = time.perf_counter()
    procs = [subprocess.Popen([C.PYTHON, __file__, "--worker", spec], cwd=C.PROJECT_ROOT, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=dict(os.environ, PYTHONPATH=str(C.PROJECT_ROOT), TF_CONFIG=json.dumps(
                                  {"cluster": cluster, "task": {"type": "worker", "index": i}})))
             for i in range(workers)]
    outputs = [p.communicate(timeout=1800) for p in procs]
    wall = time.perf_counter() - started
    for p, (_, err) in zip(procs, outputs):
        if p.returncode != 0:
            raise RuntimeError(f"worker failed: {err[-2000:]}")
    chief = json.loads(outputs[0][0].strip().splitlines()[-1])
    return {"wall_s": wall, "fit_s": chief["fit_s"], "steps_per_s": steps / chief["fit_s"],
            "examples_per_s": steps * chief["global_batch"] / chief["fit_s"], "global_batch": chief["global_batch"]}


def bench_train(args, work: Path) -> dict:
    file = write_digits(work)
    steps = args.steps or (10 if args.quick else 200)
    rounds = args.rounds or (1 if args.quick else 2)
    samples = {"1 worker": [], "2 workers": []}
    for r in range(rounds):
        for name in C.rotated(list(samples), r):
            C.log(f"train: {name}, round {r + 1}/{rounds}")
            samples[name].append(run_workers(1 if name == "1 worker" else 2, file, steps, args.batch))
    return _section(samples, ["steps_per_s", "examples_per_s", "wall_s"], base="1 worker",
                    extra={"steps": steps, "per_replica_batch": args.batch})


# -------------------------------------------------------------------------- 2. beam pool


def start_beam_pool() -> tuple[subprocess.Popen, list[str]]:
    """An external SDK worker pool (``python -m pipeline beam-pool``) and the ``pipeline run``
    options that send the Beam steps to it through the PortableRunner; kill the process after."""
    port = _free_ports(1)[0]
    pool = subprocess.Popen([C.PYTHON, "-m", "pipeline", "beam-pool", "--port", str(port)], cwd=C.PROJECT_ROOT,
                            env=dict(os.environ, PYTHONPATH=str(C.PROJECT_ROOT)),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return pool, ["--beam-arg=--runner=PortableRunner", "--beam-arg=--job_endpoint=embed",
                  "--beam-arg=--environment_type=EXTERNAL", f"--beam-arg=--environment_config=localhost:{port}"]


def bench_beam(args, work: Path) -> dict:
    rounds = args.rounds or 1
    pool, portable = start_beam_pool()
    variants = {"DirectRunner": [], "PortableRunner + pool": []}
    try:
        for r in range(rounds):
            for name in C.rotated(list(variants), r):
                out = work / f"beam-{name.split()[0]}-{r}"
                cmd = [C.PYTHON, "-m", "pipeline", "run", "--output", str(out), "--train-steps", "1",
                       "--min-accuracy", "0", "--no-cache"] + (portable if name != "DirectRunner" else [])
                C.log(f"beam: {name}, round {r + 1}/{rounds}")
                started = time.perf_counter()
                result = subprocess.run(cmd, cwd=C.PROJECT_ROOT, capture_output=True, text=True, timeout=3600,
                                        env=dict(os.environ, PYTHONPATH=str(C.PROJECT_ROOT)))
                wall = time.perf_counter() - started
                if result.returncode != 0:
                    raise RuntimeError(f"{name} run failed: {result.stderr[-2000:]}")
                counts = re.search(r"Examples: (\d+) in -> eval (\d+), train (\d+)", result.stdout)
                components = dict(re.findall(r"^\s+(\w+)\s+complete\s+([\d.]+) s", result.stdout, re.M))
                beam_s = sum(float(components.get(c, 0)) for c in
                             ("ImportExampleGen", "StatisticsGen", "Transform", "Evaluator"))
                variants[name].append({"wall_s": wall, "beam_components_s": beam_s,
                                       "examples_in_out": counts.groups() if counts else None})
    finally:
        pool.kill()
    return _section(variants, ["wall_s", "beam_components_s"], base="DirectRunner", higher_is_better=False)


# ---------------------------------------------------------------------- 3. data service


def bench_service(args, work: Path) -> dict:
    import stackenv  # noqa: F401

    from models.common.autograph import convert_tf_keras
    from models.common.inputs import make_dataset

    convert_tf_keras(False)
    file = write_digits(work)
    batches = 50 if args.quick else 2000
    steps = args.steps or (10 if args.quick else 200)
    rounds = args.rounds or (1 if args.quick else 3)
    variants = {"in process": "", "tf.data service (local)": "auto"}
    samples = {name: [] for name in variants}
    for r in range(rounds):
        for name in C.rotated(list(variants), r):
            C.log(f"service: {name}, round {r + 1}/{rounds}")
            data = make_dataset(file, _spec(), "label_xf", args.batch, seed=0, data_service=variants[name])
            iterator = iter(data)
            next(iterator)
            started = time.perf_counter()
            for _ in range(batches):
                next(iterator)
            iterate_s = time.perf_counter() - started
            fit_s = _fit(make_dataset(file, _spec(), "label_xf", args.batch, seed=0,
                                      data_service=variants[name]), steps)
            samples[name].append({"batches_per_s": batches / iterate_s, "fit_steps_per_s": steps / fit_s})
    return _section(samples, ["batches_per_s", "fit_steps_per_s"], base="in process",
                    extra={"batches": batches, "steps": steps, "batch": args.batch})


# ------------------------------------------------------------------------------ report


def _section(samples: dict, metrics, base: str, higher_is_better=True, extra=None) -> dict:
    rows, result = [], {"variants": {}, **(extra or {})}
    for name, runs in samples.items():
        entry = {"runs": runs}
        for metric in metrics:
            values = [run[metric] for run in runs]
            base_values = [run[metric] for run in samples[base]]
            entry[metric] = C.median(values)
            entry[f"{metric}_ratio_vs_{base}"] = C.ratio(C.median(values), C.median(base_values))
            entry[f"{metric}_paired_ratio"] = C.paired_ratio(values, base_values)
        result["variants"][name] = entry
        rows.append([name] + [f"{C.fmt(entry[m])} ({C.fmt(entry[f'{m}_ratio_vs_{base}'])}x)" for m in metrics])
    C.print_table(["variant"] + [f"{m} (x {base})" for m in metrics], rows)
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.worker:
        worker_main(args.worker)
        return 0
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    contention = C.Contention()
    chosen = [s for s in args.only.split(",") if s]
    payload = {"sections": {}}
    for section in chosen:
        if section not in SECTIONS:
            raise SystemExit(f"--only: unknown section {section!r}; choose from {SECTIONS}")
        payload["sections"][section] = {"train": bench_train, "beam": bench_beam,
                                        "service": bench_service}[section](args, work)
    C.write_json(NAME, payload, args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Beam throughput of StatisticsGen and Transform: DirectRunner in_memory vs multi_processing.

~100k image examples (the bundled digits, augmented: random 1-pixel shifts, contrast and
noise, so no two are identical) are written once as GZIP TFRecords in the project's feature
spec (``data.images.make_example``), prepared once (``python -m pipeline prepare``), and then
the real pipeline runs on them once per mode, into the SAME output dir under its own
``--pipeline-name`` (so the prepared data is shared, and no run sees another's cache or
served model):

    python -m pipeline run --model cnn --data D --output O --pipeline-name beam-<mode> \\
        --serving-name beam-<mode> --beam-mode <in_memory|multi_processing> [--beam-workers N] \\
        --train-steps 1 --eval-steps 1

Modes: ``in_memory``, ``mp1`` (multi_processing, 1 worker), ``mp2`` (2 workers). Times per
component come from MLMD; examples/s = examples in / component seconds. With ``--repeats``
> 1 the modes are interleaved per round (order rotated).

By default each run is stopped with SIGINT (the CLI's Ctrl-C path, exit 130) as soon as
Transform is done: the Trainer (1 step) and the Evaluator (TFMA over the whole eval split,
also on Beam) would add minutes per mode without telling more about StatisticsGen and
Transform. ``--full-runs`` lets them finish (and reports the Evaluator's Beam time too).
The augmented source and the prepared data are kept in ``--work-dir`` and reused by the next
invocation with the same ``--examples`` (writing 100k examples takes ~2 min).

Record counts are VERIFIED for every mode (data-validation#247 reported multi_processing
dropping records): StatisticsGen's num_examples summed over the splits, ExampleGen's and
Transform's output records counted directly, each compared with the examples that went in.

    .venv/bin/python benchmarks/bench_beam.py               # ~100k examples
    .venv/bin/python benchmarks/bench_beam.py --examples 50000
    .venv/bin/python benchmarks/bench_beam.py --quick       # 4k examples, 2 modes
"""
from __future__ import annotations

import glob
import json
import math
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_beam"
MODES = {
    "in_memory": ["--beam-mode", "in_memory"],
    "mp1": ["--beam-mode", "multi_processing", "--beam-workers", "1"],
    "mp2": ["--beam-mode", "multi_processing", "--beam-workers", "2"],
}
BEAM_COMPONENTS = ("ImportExampleGen", "StatisticsGen", "Transform", "Evaluator")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--examples", type=int, default=100_000)
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--work-dir", default="/tmp/tfx-bench/beam", help="wiped first")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--full-runs", action="store_true", help="let Trainer/Evaluator/Pusher finish")
    args = p.parse_args(argv)
    if args.quick:
        args.examples = min(args.examples, 4000)
        if args.modes == ",".join(MODES):
            args.modes = "in_memory,mp2"
        args.work_dir = args.work_dir + "-quick" if args.work_dir == "/tmp/tfx-bench/beam" else args.work_dir
    return args


# --------------------------------------------------------------------------- data


def write_augmented_digits(n: int, directory: Path, shards: int) -> int:
    """``n`` distinct digit images in the feature spec, GZIP TFRecords + manifest.json."""
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    from data.images import make_example

    digits = load_digits()
    base = np.rint(np.clip(digits.images, 0, 16) * 255.0 / 16.0).astype(np.float32)  # as data/images/digits.py
    rng = np.random.default_rng(0)
    copies = math.ceil(n / len(base))
    images, labels, ids = [], [], []
    for c in range(copies):
        take = min(len(base), n - c * len(base))
        batch = base[:take].copy()
        if c:  # copy 0 is the original data set
            dx, dy = rng.integers(-1, 2, take), rng.integers(-1, 2, take)
            for i in range(take):
                batch[i] = np.roll(np.roll(batch[i], dy[i], axis=0), dx[i], axis=1)
            batch *= rng.uniform(0.8, 1.2, (take, 1, 1))
            batch += rng.normal(0, 8, batch.shape)
        images.append(np.clip(np.rint(batch), 0, 255).astype(np.uint8))
        labels.extend(int(t) for t in digits.target[:take])
        ids.extend(f"aug/{c:03d}/{i:05d}" for i in range(take))
    pixels = np.concatenate(images)[..., None]
    means = pixels.reshape(len(pixels), -1).mean(axis=1)
    t1, t2 = np.quantile(means, [1 / 3, 2 / 3])
    bright = np.where(means <= t1, "dark", np.where(means <= t2, "medium", "bright"))
    directory.mkdir(parents=True, exist_ok=True)
    writers = [tf.io.TFRecordWriter(str(directory / f"aug-{i:05d}-of-{shards:05d}.tfrecord.gz"), options="GZIP")
               for i in range(shards)]
    for i in range(len(pixels)):
        ex = make_example(pixels[i], str(labels[i]), labels[i], str(bright[i]), ids[i])
        writers[i % shards].write(ex.SerializeToString(deterministic=True))
    for w in writers:
        w.close()
    (directory / "manifest.json").write_text(json.dumps({"image_shape": [8, 8, 1]}) + "\n")
    return len(pixels)


def count_records(pattern: str) -> int:
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    if not files:
        return 0
    ds = tf.data.TFRecordDataset(files, compression_type="GZIP")
    return int(ds.reduce(tf.constant(0, tf.int64), lambda n, _: n + 1).numpy())


def verify_counts(output: Path, pipeline_name: str, n_in: int):
    """Counts out of ExampleGen (records), StatisticsGen (num_examples) and Transform (records)."""
    from pipeline.results import mlmd
    from pipeline.results.summary import split_counts_from_statistics

    store = mlmd.open_store(mlmd.sqlite_config(str(output / "metadata.sqlite")))
    run = mlmd.latest_run(store, pipeline_name)

    def uri(node, key):
        execution = run.get(node)
        if execution is None or not execution.outputs.get(key):
            return None
        return execution.outputs[key][0].uri

    counts = {"in": n_in}
    eg = uri("ImportExampleGen", "examples")
    if eg:
        counts["example_gen_records"] = count_records(os.path.join(eg, "Split-*", "*"))
    st = uri("StatisticsGen", "statistics")
    if st:
        per_split = split_counts_from_statistics(st)
        counts["statistics_gen_per_split"] = per_split
        counts["statistics_gen_total"] = sum(per_split.values())
    tx = uri("Transform", "transformed_examples")
    if tx:
        counts["transform_records"] = count_records(os.path.join(tx, "Split-*", "*"))
    checked = [k for k in ("example_gen_records", "statistics_gen_total", "transform_records") if k in counts]
    counts["all_equal_input"] = bool(checked) and all(counts[k] == n_in for k in checked)
    counts["checked"] = checked
    times = {c.node_id: {"seconds": c.seconds, "state": c.state} for c in run.values()}
    return counts, times


def run_until_transform(cmd, timeout: float, log_path: Path, stop: bool, on_transform_done=None,
                        grace_s: float = 120):
    """Run ``cmd``; with ``stop``, send SIGINT once the CLI logs that Transform is done (and
    SIGKILL if it is still running ``grace_s`` later). ``on_transform_done()`` is called then."""
    import signal
    import subprocess
    import threading
    import time

    started = time.perf_counter()
    # SIGINT back to its default in the run: a shell without job control starts background
    # jobs (``bench ... &``) with SIGINT ignored, the run inherits that, and Python then never
    # raises KeyboardInterrupt (seen: a run went on into the Evaluator).
    proc = subprocess.Popen(cmd, cwd=str(C.PROJECT_ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    err_lines, out_chunks = [], []
    transform_done_at = [None]

    def read_err():
        for line in proc.stderr:
            err_lines.append(line)
            if transform_done_at[0] is None and "\u2713 Transform" in line:
                transform_done_at[0] = time.perf_counter() - started
                if on_transform_done is not None:
                    on_transform_done()
                if stop:
                    proc.send_signal(signal.SIGINT)
                    threading.Timer(grace_s, lambda: proc.poll() is None and proc.kill()).start()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    out_chunks.append(proc.stdout.read())
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    reader.join(timeout=30)
    wall = time.perf_counter() - started
    stderr = "".join(err_lines)
    log_path.write_text(f"$ {C.shell_command(cmd)}\n# exit {proc.returncode}, {wall:.1f} s"
                        f"{', SIGINT after Transform' if stop else ''}\n--- stdout\n{''.join(out_chunks)}"
                        f"\n--- stderr\n{stderr}")
    ok = proc.returncode == 0 or (stop and transform_done_at[0] is not None and proc.returncode in (130, -9))
    return {"wall_s": wall, "returncode": proc.returncode, "ok": ok, "stderr": stderr,
            "until_transform_done_s": transform_done_at[0], "stopped_after_transform": stop}


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)
    import stackenv  # noqa: F401

    work = Path(args.work_dir)
    source, output = work / f"source-{args.examples}-{args.shards}", work / "output"
    # Keep the source and the prepared data (output/data, content-addressed); drop earlier runs.
    for stale in ("tfx", "serving", "schema", "metadata.sqlite", "logs"):
        path = output / stale
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)
    marker = source / "COMPLETE"
    started = C.now()
    if marker.exists():
        n_in = int(marker.read_text())
        C.log(f"reusing {n_in} augmented examples in {source}")
    else:
        shutil.rmtree(source, ignore_errors=True)
        C.log(f"writing {args.examples} augmented digit examples to {source}")
        n_in = write_augmented_digits(args.examples, source, args.shards)
        marker.write_text(str(n_in))
    write_s = C.now() - started
    prep_cmd = [C.PYTHON, "-m", "pipeline", "prepare", "--model", "cnn", "--data", str(source), "--output", str(output)]
    C.log(f"{n_in} examples ready in {write_s:.0f} s; prepare: {C.shell_command(prep_cmd)}")
    prep = C.run_timed(prep_cmd, timeout=args.timeout, log_path=work / "prepare.log")
    if prep["returncode"] != 0:
        print(prep["stderr"][-3000:], file=sys.stderr)
        raise SystemExit("pipeline prepare failed")
    C.log(f"prepared in {prep['wall_s']:.0f} s (first time: reads, checks and re-writes every record; "
          "later: cached)")

    modes = [m for m in args.modes.split(",") if m]
    runs = {m: [] for m in modes}
    for r in range(args.repeats):
        for mode in C.rotated(modes, r):
            name = f"beam-{mode}-r{r}"
            cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", "cnn", "--data", str(source),
                   "--output", str(output), "--pipeline-name", name, "--serving-name", name,
                   *MODES[mode], "--train-steps", "1", "--eval-steps", "1", "--min-accuracy", "0"]
            C.log(f"round {r}: {mode}")
            out = run_until_transform(cmd, args.timeout, work / f"{name}.log", stop=not args.full_runs)
            counts, times = verify_counts(output, name, n_in)
            entry = {"command": C.shell_command(cmd), "wall_s": out["wall_s"], "returncode": out["returncode"],
                     "ok": out["ok"], "until_transform_done_s": out["until_transform_done_s"],
                     "stopped_after_transform": out["stopped_after_transform"],
                     "log": str(work / f"{name}.log"), "counts": counts, "components": times}
            if not out["ok"]:
                entry["error"] = (out["stderr"].strip().splitlines() or ["?"])[-3:]
            runs[mode].append(entry)
            C.log(f"  {out['wall_s']:.0f} s (Transform done at {out['until_transform_done_s'] or float('nan'):.0f} s), "
                  f"exit {out['returncode']}, counts ok: {counts['all_equal_input']}, "
                  + ", ".join(f"{k} {times.get(k, {}).get('seconds', float('nan')):.1f} s" for k in BEAM_COMPONENTS))

    results, rows, count_rows = {}, [], []
    base = runs.get("in_memory")
    for mode, entries in runs.items():
        res = {"runs": entries, "components": {}}
        for comp in BEAM_COMPONENTS:
            secs = [e["components"].get(comp, {}).get("seconds") for e in entries]
            secs = [s for s in secs if s]
            if not secs:
                continue
            med = C.median(secs)
            base_secs = [e["components"].get(comp, {}).get("seconds") for e in base] if base else []
            speedup = C.paired_ratio([s for s in base_secs if s], secs) if base else None
            res["components"][comp] = {"seconds": C.summarize(secs), "examples_per_s": n_in / med,
                                       "speedup_vs_in_memory": speedup}
        both = [e["components"].get("StatisticsGen", {}).get("seconds", 0) +
                e["components"].get("Transform", {}).get("seconds", 0) for e in entries]
        res["stats_plus_transform_s"] = C.median(both)
        res["stats_plus_transform_examples_per_s"] = C.rate(n_in, C.median(both))
        res["counts_ok"] = all(e["counts"]["all_equal_input"] for e in entries)
        res["ok"] = all(e["ok"] for e in entries)
        res["until_transform_done_s"] = C.median([e["until_transform_done_s"] for e in entries
                                                  if e["until_transform_done_s"]])
        results[mode] = res
        comps = res["components"]
        rows.append([mode, comps.get("StatisticsGen", {}).get("seconds", {}).get("median"),
                     comps.get("StatisticsGen", {}).get("examples_per_s"),
                     comps.get("Transform", {}).get("seconds", {}).get("median"),
                     comps.get("Transform", {}).get("examples_per_s"),
                     res["stats_plus_transform_examples_per_s"],
                     comps.get("ImportExampleGen", {}).get("seconds", {}).get("median"),
                     comps.get("Evaluator", {}).get("seconds", {}).get("median"),
                     res["until_transform_done_s"]])
        c = entries[0]["counts"]
        count_rows.append([mode, n_in, c.get("example_gen_records"), c.get("statistics_gen_total"),
                           json.dumps(c.get("statistics_gen_per_split", {})), c.get("transform_records"),
                           "OK" if res["counts_ok"] else "MISMATCH"])
    if base and results.get("in_memory"):
        ref = results["in_memory"]["stats_plus_transform_s"]
        for mode, res in results.items():
            res["stats_plus_transform_speedup_vs_in_memory"] = C.ratio(ref, res["stats_plus_transform_s"])

    C.print_table(["mode", "StatsGen s", "StatsGen ex/s", "Transform s", "Transform ex/s",
                   "Stats+Transform ex/s", "ExampleGen s", "Evaluator s", "start->Transform done s"], rows,
                  title=f"\nBeam DirectRunner on {n_in:,} examples (MLMD component times; medians of {args.repeats})")
    C.print_table(["mode", "in", "ExampleGen out", "StatisticsGen out", "per split", "Transform out", "check"],
                  count_rows, title="\nRecord counts (data-validation#247 check)")
    for mode, res in results.items():
        sp = res.get("stats_plus_transform_speedup_vs_in_memory")
        print(f"{mode}: StatisticsGen+Transform {res['stats_plus_transform_s']:.1f} s"
              + (f" = {sp:.2f}x in_memory's speed" if sp else "")
              + ("" if res["ok"] else "  [RUN FAILED]") + ("" if res["counts_ok"] else "  [COUNTS DIFFER]"))
    payload = {"num_examples": n_in, "shards": args.shards, "write_s": write_s,
               "prepare_s": prep["wall_s"], "prepare_command": C.shell_command(prep_cmd),
               "modes": results, "repeats": args.repeats, "stopped_after_transform": not args.full_runs,
               "counts_ok_all_modes": all(r["counts_ok"] for r in results.values())}
    C.write_json(NAME, payload, args, machine, contention)
    return 0 if payload["counts_ok_all_modes"] and all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Ingestion of an image folder, side by side in one run: the old prepare step (one process,
``data/images``) vs the pipeline's ImageExampleGen (``components/image_example_gen.py``) on
Beam's DirectRunner ``in_memory`` and ``multi_processing``, alone and followed by the
pipeline's StatisticsGen and Transform.

Variants (``--variants``, comma-separated):
- ``prepare``: the old one-process conversion;
- ``example-gen in_memory`` / ``example-gen multi_processing``: TFX's real executor alone,
  in a child process, writing train/eval GZIP TFRecords;
- ``pipeline in_memory`` / ``pipeline multi_processing``: ``python -m pipeline run --data
  FOLDER`` stopped with SIGINT once Transform is done (ExampleGen, StatisticsGen, SchemaGen,
  ExampleValidator, Transform; per-component times from MLMD);
- ``pipeline portable``: the same on the PortableRunner (embedded job server) with an
  external SDK worker pool (``python -m pipeline beam-pool``), whose processes count too.

A sampler sums the RSS of the child and all its descendants every 0.2 s (peak memory over
all processes; for the pipeline rows, until Transform is done). Counts in (files
generated) must equal counts out (examples written; for the pipeline also StatisticsGen's
count and Transform's records), or the row says so and the exit code is 1.

    python benchmarks/bench_ingest.py --examples 100000     # augmented digits as PNG files
    python benchmarks/bench_ingest.py --examples 1000000 --variants "pipeline in_memory"
    python benchmarks/bench_ingest.py --quick               # 2,000 files, smoke only
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_ingest"
VARIANTS = ("prepare", "example-gen in_memory", "example-gen multi_processing", "pipeline in_memory",
            "pipeline multi_processing", "pipeline portable")
PIPELINE_STEPS = ("ImportExampleGen", "StatisticsGen", "Transform")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--examples", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2, help="multi_processing workers")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from: {', '.join(VARIANTS)}")
    p.add_argument("--timeout", type=float, default=6 * 3600, help="seconds per variant")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/ingest")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def generate(folder: Path, count: int) -> int:
    """``count`` augmented digits (shifted, noisy 8x8 -> 16x16) as PNG files in class folders."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    marker = folder / f".complete-{count}"
    if marker.exists():
        return count
    digits = load_digits()
    rng = np.random.default_rng(0)
    for i in range(count):
        k = i % len(digits.images)
        image = np.kron(digits.images[k] * 15, np.ones((2, 2)))
        image = np.roll(image, rng.integers(-2, 3, size=2), axis=(0, 1)) + rng.normal(0, 8, image.shape)
        target = folder / str(digits.target[k])
        target.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.clip(image, 0, 255).astype(np.uint8)).save(target / f"{i:07d}.png")
    marker.touch()
    return count


def child(variant: str, data: Path, out: Path, workers: int) -> int:
    """Run one variant in this process; returns the examples written."""
    import stackenv  # noqa: F401

    if variant == "prepare":
        from data.images import prepare_image_dataset

        return prepare_image_dataset(str(data), out / "cache", image_size=16, channels=1).num_examples
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from support.example_gen_helpers import run_example_gen

    from components.image_example_gen import ImageExampleGenExecutor
    from components.ingest_config import settings_config

    mode = variant.split()[-1]
    beam_args = [f"--direct_running_mode={mode}"] + ([f"--direct_num_workers={workers}"] if mode != "in_memory" else [])

    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor

    def executor() -> ImageExampleGenExecutor:
        return ImageExampleGenExecutor(BaseBeamExecutor.Context(beam_pipeline_args=beam_args))

    splits = run_example_gen(executor, str(data), out / "examples", custom_config=settings_config(image_size=16,
                                                                                                   channels=1))
    return sum(len(records) for records in splits.values())


def measure(variant: str, data: Path, out: Path, workers: int, timeout: float, files: int) -> dict:
    """One variant in a child process: seconds, peak RSS over all processes, examples written."""
    if variant.startswith("pipeline"):
        return measure_pipeline(variant.split()[-1], data, out, workers, timeout, files)
    cmd = [sys.executable, __file__, "--child", variant, "--work-dir", str(out.parent), "--workers", str(workers)]
    with C.PeakChildrenRss() as memory:
        started = time.monotonic()
        process = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, timeout=timeout,
                                 env={**os.environ, "BENCH_DATA": str(data), "BENCH_OUT": str(out)})
        seconds = time.monotonic() - started
    written = json.loads(process.stdout.strip().splitlines()[-1])["written"] if process.returncode == 0 else None
    return {"variant": variant, "seconds": seconds, "peak_rss_gib": memory.peak_gib, "written": written,
            "returncode": process.returncode}


def measure_pipeline(mode: str, data: Path, out: Path, workers: int, timeout: float, files: int) -> dict:
    """``pipeline run --data FOLDER`` until Transform is done; times per step from MLMD."""
    from bench_beam import run_until_transform, verify_counts
    from bench_scale import start_beam_pool

    name = f"ingest-{mode.replace('_', '-')}"
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", "cnn", "--data", str(data), "--image-size", "16",
           "--channels", "1", "--output", str(out), "--pipeline-name", name, "--serving-name", name,
           "--train-steps", "1", "--eval-steps", "1", "--min-accuracy", "0"]
    if mode != "portable":
        cmd += ["--beam-mode", mode, *(["--beam-workers", str(workers)] if mode != "in_memory" else [])]
    out.mkdir(parents=True, exist_ok=True)
    with C.PeakChildrenRss() as memory:
        pool = None
        if mode == "portable":
            pool, portable = start_beam_pool()
            cmd += portable
        try:
            run = run_until_transform(cmd, timeout, out / "run.log", stop=True, on_transform_done=memory.stop)
        finally:
            if pool is not None:
                pool.kill()
    counts, times = verify_counts(out, name, files)
    steps = {step: times.get(step, {}).get("seconds") for step in PIPELINE_STEPS}
    return {"variant": f"pipeline {mode}", "command": C.shell_command(cmd), "seconds": run["until_transform_done_s"],
            "peak_rss_gib": memory.peak_gib, "written": counts.get("example_gen_records"),
            "statistics_gen_total": counts.get("statistics_gen_total"),
            "transform_records": counts.get("transform_records"), "steps_s": steps,
            "returncode": run["returncode"], "ok": run["ok"], "log": str(out / "run.log")}


def count_files(data: Path) -> int:
    return sum(1 for _ in data.glob("*/*.png"))


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        written = child(args.child, Path(os.environ["BENCH_DATA"]), Path(os.environ["BENCH_OUT"]), args.workers)
        print(json.dumps({"written": written}))
        return 0
    count = 2_000 if args.quick else args.examples
    work = Path(args.work_dir)
    data = work / f"digits-{count}"
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    C.log(f"generating {count} PNG files in {data}")
    generated = generate(data, count)
    if count_files(data) != generated:
        raise SystemExit(f"{data} holds {count_files(data)} PNG files, not {generated}: delete it and re-run")
    rows, results = [], []
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    for variant in variants:
        out = work / f"out-{variant.replace(' ', '-')}"
        subprocess.run(["rm", "-rf", str(out)], check=True, timeout=600)
        C.log(f"{variant} ...")
        result = measure(variant, data, out, args.workers, args.timeout, generated)
        outs = [result["written"], *[result[k] for k in ("statistics_gen_total", "transform_records") if k in result]]
        result["counts_match"] = all(n == generated for n in outs)
        results.append(result)
        steps = result.get("steps_s", {})
        rows.append([variant, count, C.fmt(result["seconds"]), C.fmt(C.rate(count, result["seconds"] or float("nan"))),
                     *[C.fmt(steps.get(step)) if steps else "" for step in PIPELINE_STEPS],
                     C.fmt(result["peak_rss_gib"]), " / ".join(str(n) for n in outs),
                     "yes" if result["counts_match"] else "NO"])
        C.log(f"  {rows[-1]}")
    C.print_table(["variant", "files", "seconds", "examples/s", *[f"{step} s" for step in PIPELINE_STEPS],
                   "peak RSS GiB (all processes)", "written (/ stats / transform)", "in = out"], rows,
                  title=f"Ingestion of {count} image files (pipeline rows: start until Transform is done)")
    C.write_json(NAME, {"examples": count, "results": results}, args, machine)
    return 0 if all(result["counts_match"] for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Ingestion of an image folder, side by side in one run: the old prepare step (one process,
``data/images``) vs the pipeline's ImageExampleGen (``components/image_example_gen.py``) on
Beam's DirectRunner ``in_memory`` and ``multi_processing``.

Each variant runs in its own child process (the ExampleGen through TFX's real executor,
writing train/eval GZIP TFRecords); a sampler sums the RSS of that process and all its
children every 0.2 s (peak memory summed over processes). Counts in (files generated) must
equal counts out (examples written), or the row says so.

    python benchmarks/bench_ingest.py --examples 100000     # augmented digits as PNG files
    python benchmarks/bench_ingest.py --quick               # 2,000 files, smoke only
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_ingest"
VARIANTS = ("prepare", "example-gen in_memory", "example-gen multi_processing")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--examples", type=int, default=100_000)
    p.add_argument("--workers", type=int, default=2, help="multi_processing workers")
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
    from example_gen_helpers import run_example_gen

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


def measure(variant: str, data: Path, out: Path, workers: int) -> dict:
    import psutil

    cmd = [sys.executable, __file__, "--child", variant, "--work-dir", str(out.parent), "--workers", str(workers)]
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                               env={**os.environ, "BENCH_DATA": str(data), "BENCH_OUT": str(out)})
    peak, done = [0], threading.Event()

    def sample():
        parent = psutil.Process(process.pid)
        while not done.is_set():
            try:
                total = sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])
                peak[0] = max(peak[0], total)
            except psutil.Error:
                pass
            time.sleep(0.2)

    thread = threading.Thread(target=sample, daemon=True)
    started = time.monotonic()
    thread.start()
    stdout, _ = process.communicate(timeout=6 * 3600)
    seconds = time.monotonic() - started
    done.set()
    written = json.loads(stdout.strip().splitlines()[-1])["written"] if process.returncode == 0 else None
    return {"variant": variant, "seconds": seconds, "peak_rss_gib": peak[0] / 2**30, "written": written,
            "returncode": process.returncode}


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
    rows, results = [], []
    for variant in VARIANTS:
        out = work / f"out-{variant.replace(' ', '-')}"
        subprocess.run(["rm", "-rf", str(out)], check=True, timeout=600)
        C.log(f"{variant} ...")
        result = measure(variant, data, out, args.workers)
        result["counts_match"] = result["written"] == generated
        results.append(result)
        rows.append([variant, count, C.fmt(result["seconds"]), C.fmt(C.rate(count, result["seconds"])),
                     C.fmt(result["peak_rss_gib"]), result["written"], "yes" if result["counts_match"] else "NO"])
    C.print_table(["variant", "files", "seconds", "examples/s", "peak RSS GiB (all processes)", "written",
                   "in = out"], rows, title=f"Ingestion of {count} image files")
    C.write_json(NAME, {"examples": count, "results": results}, args, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every component of a whole run at scale: seconds, examples in and out, peak memory, one table.

Two data sets, each run once through the real CLI (``python -m pipeline run``, one epoch):

- ``images``: ``--images`` small grayscale PNGs (``--size`` pixels a side) in 10 class folders.
  Each class is a fixed random pattern under noise, so one epoch learns something and the
  Evaluator and Pusher do their real work (a model of noise would never be blessed).
- ``text``: ``--words`` words of real prose (Python's bundled documentation topics, the
  generator of ``bench_text_ingest.py``: .txt/.md/.rst/.html, some compressed, nested folders).
  Training is capped by ``--text-train-steps``: one epoch of millions of windows is hours of
  seq2seq training on 2 cores, and the question here is what the data-parallel steps cost.

Per component, from the run's ML Metadata (not from logs): seconds; records in and out, counted
in the artifacts themselves (the ExampleGen's and Transform's TFRecords, StatisticsGen's
per-split counts, the Evaluator's ``example_count``), so a component that drops examples shows
up as a difference; and the run's peak resident memory summed over every process it started, overall
and while each component ran (sampled every 0.5 s, laid on MLMD's start and end times).

``--beam-mode`` runs each data set once per mode given (``in_memory,multi_processing``), so the
two Beam settings stand side by side in one table.

    python benchmarks/bench_whole_pipeline.py --images 100000 --only images
    python benchmarks/bench_whole_pipeline.py --images 1000000 --words 10000000 \\
        --beam-mode in_memory,multi_processing          # both Beam modes side by side (1-2 h on 2 cores)
    python benchmarks/bench_whole_pipeline.py --quick   # 2,000 images, 50k words: a smoke run
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from multiprocessing import Pool
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_whole_pipeline"
CLASSES = 10
WORDS_PER_DOCUMENT = 1650   # the mean of bench_text_ingest's documents (300 to 3,000 words)


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--images", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=8, help="image side in pixels")
    p.add_argument("--words", type=int, default=10_000_000)
    p.add_argument("--only", default="images,text", help="images, text or both (comma-separated)")
    p.add_argument("--beam-mode", default="in_memory", help="comma-separated: in_memory, multi_processing")
    p.add_argument("--text-train-steps", type=int, default=500)
    p.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per run")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/whole-pipeline")
    args = p.parse_args(argv)
    if args.quick:
        args.images, args.words, args.text_train_steps = 2000, 50_000, 20
    return args


def _write_images(job: tuple[str, int, int, int, int]) -> int:
    import numpy as np
    from PIL import Image

    folder, start, stop, size, seed = job
    patterns = np.random.default_rng(seed).integers(0, 256, (CLASSES, size, size)).astype(np.float32)
    for i in range(start, stop):
        label = i % CLASSES
        noise = np.random.default_rng(seed + 1 + i).integers(0, 256, (size, size))
        pixels = np.clip(0.6 * patterns[label] + 0.4 * noise, 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(Path(folder) / f"class{label}" / f"{i:08d}.png")
    return stop - start


def generate_images(folder: Path, count: int, size: int) -> Path:
    """``count`` PNGs, deterministic (seeded per image), written by every core."""
    marker = folder.parent / f".{folder.name}.complete"   # beside it: the run would list it as a skipped file
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    for label in range(CLASSES):
        (folder / f"class{label}").mkdir(parents=True)
    chunk = 10_000
    jobs = [(str(folder), s, min(s + chunk, count), size, 0) for s in range(0, count, chunk)]
    done = 0
    with Pool(C.usable_cores()) as pool:
        for written in pool.imap_unordered(_write_images, jobs):
            done += written
            C.log(f"  images written {done:,}/{count:,}")
    marker.touch()
    return folder


def generate_text(folder: Path, words: int) -> Path:
    from bench_text_ingest import generate

    generate(folder, max(1, words // WORDS_PER_DOCUMENT))
    return folder


def count_records(uri: str) -> int:
    """TFRecords under an Examples artifact (every split), read by TensorFlow's own reader."""
    import tensorflow as tf

    files = tf.io.gfile.glob(os.path.join(uri, "Split-*", "*"))
    if not files:
        return 0
    dataset = tf.data.TFRecordDataset(files, compression_type="GZIP", num_parallel_reads=4)
    return int(dataset.reduce(0, lambda n, _: n + 1))


def component_rows(output_dir: Path, pipeline_name: str, memory: C.PeakChildrenRss | None = None) -> list[dict]:
    """Seconds and records in/out of every node of the latest run, from MLMD and the artifacts; with
    ``memory``, the run's peak RSS while the node ran (MLMD's start and end times)."""
    from artifacts import tfma_results
    from pipeline.graph import EVALUATOR, EXAMPLE_GEN, STATISTICS_GEN, TRANSFORM
    from pipeline.results import mlmd
    from pipeline.results.summary import split_counts_from_statistics

    store = mlmd.open_store(mlmd.sqlite_config(str(output_dir / mlmd.METADATA_FILE)))
    run = mlmd.latest_run(store, pipeline_name)
    counts: dict[str, int | None] = {}
    rows = []
    for node in sorted(run.values(), key=lambda n: n.execution.id):
        row: dict = {"node": node.node_id, "state": node.state, "seconds": round(node.seconds, 1)}
        if memory is not None:
            peak = memory.peak_gib_between(node.execution.create_time_since_epoch / 1000,
                                           node.execution.last_update_time_since_epoch / 1000)
            row["peak_rss_gib"] = None if peak is None else round(peak, 2)
        if node.node_id == EXAMPLE_GEN:
            row["out"] = counts["examples"] = count_records(mlmd.first_uri(node.outputs, "examples"))
        elif node.node_id == STATISTICS_GEN:
            splits = split_counts_from_statistics(mlmd.first_uri(node.outputs, "statistics"))
            row["in"], counts["eval"] = sum(splits.values()), splits.get("eval")
        elif node.node_id == TRANSFORM:
            row["in"] = counts.get("examples")
            written = mlmd.first_uri(node.outputs, "transformed_examples")  # None: it only analysed (cnn)
            row["out"] = count_records(written) if written else None
        elif node.node_id == EVALUATOR:
            overall = tfma_results.overall_metrics(mlmd.first_uri(node.outputs, "evaluation"))
            row["in"] = int(overall.get("example_count", 0))
            row["eval_split"] = counts.get("eval")
        rows.append(row)
    return rows


def run_once(data_name: str, data: Path, mode: str, work: Path, args) -> dict:
    model = "cnn" if data_name == "images" else "seq2seq"
    output = work / f"run-{data_name}-{mode}"
    shutil.rmtree(output, ignore_errors=True)
    extra = ["--beam-mode", mode]
    extra += (["--epochs", "1", "--image-size", str(args.size)] if model == "cnn"
              else ["--train-steps", str(args.text_train_steps)])
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", model, "--data", str(data),
           "--output", str(output), *extra]
    C.log(f"run: {C.shell_command(cmd)}")
    with C.PeakChildrenRss(interval=0.5) as memory:
        out = C.run_timed(cmd, timeout=args.timeout, log_path=work / f"run-{data_name}-{mode}.log")
    result = {"data": data_name, "mode": mode, "command": C.shell_command(cmd), "wall_s": round(out["wall_s"], 1),
              "returncode": out["returncode"], "peak_rss_gib": round(memory.peak_gib, 2),
              "summary": out["stdout"].strip().splitlines()[-25:]}
    try:
        result["components"] = component_rows(output, f"{model}-pipeline", memory)
    except Exception as error:  # noqa: BLE001 - a failed run still reports its wall time
        result["components"], result["mlmd_error"] = [], f"{type(error).__name__}: {error}"
    return result


def print_results(results: list[dict], inputs: dict[str, int]) -> None:
    for r in results:
        unit = "files" if r["data"] == "images" else "words"
        rows = [(c["node"], c["state"], c["seconds"], c.get("in", ""), c.get("out", ""),
                 C.fmt(c.get("out", c.get("in", 0)) / c["seconds"]) if c["seconds"] and c.get("out", c.get("in")) else "",
                 "" if c.get("peak_rss_gib") is None else c["peak_rss_gib"])
                for c in r["components"]]
        rows.append(("whole run (wall)", f"exit {r['returncode']}", r["wall_s"], f"{inputs[r['data']]:,} {unit}", "",
                     "", r["peak_rss_gib"]))
        C.print_table(["component", "state", "seconds", "records in", "records out", "records/s", "peak RSS GiB"], rows,
                      title=f"{r['data']}, Beam {r['mode']}: peak RSS {r['peak_rss_gib']} GiB")
        whole = {c[k] for c in r["components"] if "eval_split" not in c for k in ("in", "out") if c.get(k) is not None}
        evaluated = [(c["in"], c["eval_split"]) for c in r["components"] if "eval_split" in c]
        print(f"records in = out (ExampleGen, StatisticsGen, Transform): {'yes' if len(whole) == 1 else 'NO'} "
              f"{sorted(whole)}; Evaluator examples = eval split: "
              + ", ".join(f"{'yes' if a == b else 'NO'} ({a:,} / {b:,})" for a, b in evaluated))


def main(argv=None) -> int:
    args = parse_args(argv)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    contention = C.Contention()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    modes = [m.strip() for m in args.beam_mode.split(",") if m.strip()]
    data, inputs = {}, {}
    if "images" in only:
        started = time.perf_counter()
        data["images"] = generate_images(work / f"images-{args.images}-{args.size}", args.images, args.size)
        inputs["images"] = args.images
        C.log(f"images ready in {time.perf_counter() - started:.0f} s")
    if "text" in only:
        data["text"] = generate_text(work / f"text-{args.words}", args.words)
        inputs["text"] = args.words
    results = [run_once(name, folder, mode, work, args) for name, folder in data.items() for mode in modes]
    print_results(results, inputs)
    C.write_json(NAME, {"results": results}, args, machine, contention)
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

"""The project against TFX's own "MNIST native Keras" example, on the same digits.

TFX ships the example in its wheel (``tfx/examples/mnist/mnist_pipeline_native_keras.py`` with
``mnist_utils_native_keras.py`` and ``_base``): ImportExampleGen of TFRecords holding
``image_floats`` (784 floats in [-0.5, 0.5]) and ``image_class`` (int64), StatisticsGen,
SchemaGen, ExampleValidator, Transform, a dense Keras model trained 5,000 steps of 40, TFMA's
Evaluator with an accuracy threshold of 0.8, a file Pusher. This runs that module unmodified: it is
imported from the installed wheel and its ``_create_pipeline`` is called with paths under the work
directory and the Beam mode asked for (``--direct_running_mode``; the example ships
``multi_processing`` with ``--direct_num_workers=0``), through ``BeamDagRunner`` as its ``__main__``
does. The project runs ``python -m pipeline run --model cnn --data <PNG class folders> --output
<dir>`` with its defaults, which also fits reference predictors with intervals, converts and checks
TFLite models and writes a model card.

The data: ``N`` 28x28 grayscale digits built without a download from scikit-learn's bundled 8x8
digits (1,797 images): each is upscaled to 20x20 and placed in the 28x28 frame as MNIST centres
its digits, with a seeded shift of up to 2 pixels, a contrast scale and pixel noise, so every
image is distinct. The same uint8 pixels are written twice: PNG class folders for the project,
uncompressed TFRecords in the example's format (``pixel / 255 - 0.5``) for the example.

Each run is a fresh subprocess. Reported per run: each component's seconds from the run's own
ML Metadata (execution create to last update), the wall time of the whole process, the peak RSS
summed over the process tree (sampled every 0.5 s), the Evaluator's accuracy; and the ratios
project / example per Beam mode of the example. Runs are ordered example in_memory, project,
example multi_processing within a size, so load drift hits them alike; each run's input is read once
just before it (not timed), so that none reads its input from disk and another from the page cache
(at 1,000,000 digits the example's run held 14 GiB and evicted the project's PNGs); with 2
shared cores, compare the ratios, and only within one invocation.

    python benchmarks/bench_tfx_example.py                         # 10k, 50k, 200k (long)
    python benchmarks/bench_tfx_example.py --sizes 10000,50000
    python benchmarks/bench_tfx_example.py --sizes 50000 --beam-mode in_memory
    python benchmarks/bench_tfx_example.py --quick                 # 2,000 images: a smoke run
    python benchmarks/bench_tfx_example.py --sizes 10000 --project-args= \
        --project-args="--image-size 28 --channels 1"              # two project runs: defaults, native shape
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_tfx_example"
SIDE = 28
EXAMPLE_PIPELINE = "mnist_native_keras"
PROJECT_PIPELINE = "cnn-pipeline"
EXAMPLE_MODULE = "tfx.examples.mnist.mnist_pipeline_native_keras"


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--sizes", default="10000,50000,200000", help="comma-separated image counts")
    p.add_argument("--beam-mode", default="in_memory,multi_processing",
                   help="the example's Beam modes, comma-separated (in_memory, multi_processing)")
    p.add_argument("--only", default="example,project", help="example, project or both")
    p.add_argument("--project-args", action="append", default=None,
                   help="extra flags for the project's run; repeat for one run per set (default: one run, "
                        "the defaults; '' names it)")
    p.add_argument("--repeat", type=int, default=1,
                   help="rounds of the whole plan per size, interleaved (example, project, example, ...): each "
                        "ratio is taken within its round, and the spread over rounds is printed")
    p.add_argument("--timeout", type=float, default=3 * 3600, help="seconds per run")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/tfx-example")
    p.add_argument("--run-example", nargs=4, metavar=("DATA", "ROOT", "MODE", "_"), default=None,
                   help=argparse.SUPPRESS)   # the child process of an example run
    args = p.parse_args(argv)
    if args.quick:
        args.sizes = "2000"
    args.project_args = args.project_args or [""]
    return args


# ------------------------------------------------------------------------------------ data


def digit_pixels(count: int, seed: int = 0):
    """``count`` distinct 28x28 uint8 digits and their labels, deterministic for ``seed``."""
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    base = [np.asarray(Image.fromarray(np.uint8(np.clip(img, 0, 16) * 255 / 16)).resize((20, 20), Image.BILINEAR),
                       dtype=np.float32) for img in digits.images]
    rng = np.random.default_rng(seed)
    shifts = rng.integers(-2, 3, (count, 2))
    contrast = rng.uniform(0.75, 1.15, count)
    pixels = np.zeros((count, SIDE, SIDE), np.uint8)
    for i in range(count):
        frame = np.zeros((SIDE, SIDE), np.float32)
        top, left = 4 + shifts[i, 0], 4 + shifts[i, 1]
        frame[top:top + 20, left:left + 20] = base[i % len(base)] * contrast[i]
        frame += rng.normal(0, 12, frame.shape)
        pixels[i] = np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    labels = digits.target[np.arange(count) % len(base)].astype(np.int64)
    return pixels, labels


def write_data(folder: Path, count: int) -> tuple[Path, Path]:
    """PNG class folders (``png/<digit>/``) and TFRecords (``tfrecords/``) of the same pixels."""
    png, records = folder / "png", folder / "tfrecords"
    marker = folder / ".complete"
    if marker.exists():
        return png, records
    shutil.rmtree(folder, ignore_errors=True)
    import stackenv  # noqa: F401  (the project's TF environment, before TensorFlow loads)

    import tensorflow as tf
    from PIL import Image

    pixels, labels = digit_pixels(count)
    for digit in range(10):
        (png / f"digit{digit}").mkdir(parents=True)
    records.mkdir(parents=True)
    shards = max(1, count // 25_000)
    writers = [tf.io.TFRecordWriter(str(records / f"digits-{i:05d}-of-{shards:05d}.tfrecord")) for i in range(shards)]
    started = time.monotonic()
    for i in range(count):
        Image.fromarray(pixels[i]).save(png / f"digit{labels[i]}" / f"{i:07d}.png")
        floats = (pixels[i].reshape(-1).astype("float32") / 255.0 - 0.5).tolist()
        writers[i % shards].write(tf.train.Example(features=tf.train.Features(feature={
            "image_floats": tf.train.Feature(float_list=tf.train.FloatList(value=floats)),
            "image_class": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
        })).SerializeToString())
        if (i + 1) % 20_000 == 0:
            C.log(f"  images written {i + 1:,}/{count:,} ({time.monotonic() - started:.0f} s)")
    for writer in writers:
        writer.close()
    marker.touch()
    return png, records


# ------------------------------------------------------------------------------------ runs


def read_once(*folders: Path) -> int:
    """Read every file under ``folders`` once; the bytes read. A first round otherwise reads the project's
    200,000 PNG files from disk (after data written earlier, or another checkout's runs) while the example's
    few TFRecord files are cached: that once made one ImportExampleGen twice as slow as the next. Read before
    each run: at 1,000,000 digits the run before evicted part of them (docs/history/benchmarks-log.md,
    "A million digits beside TFX's example")."""
    total = 0
    for folder in folders:
        for path in folder.rglob("*"):
            if path.is_file():
                total += len(path.read_bytes())
    return total


def run_example_here(data: str, root: str, mode: str) -> None:
    """The child process: TFX's example module, as installed, with our paths and Beam mode."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")   # TFX 1.16's Keras examples run on tf-keras
    import importlib

    from tfx.orchestration.beam.beam_dag_runner import BeamDagRunner

    example = importlib.import_module(EXAMPLE_MODULE)
    module_file = str(Path(example.__file__).with_name("mnist_utils_native_keras.py"))
    shipped = list(example._beam_pipeline_args)   # noqa: SLF001 - the example's own settings
    beam_args = [a for a in shipped if not a.startswith("--direct_running_mode")]
    beam_args.insert(0, f"--direct_running_mode={mode}")
    BeamDagRunner().run(example._create_pipeline(   # noqa: SLF001 - the example's own entry point
        pipeline_name=example._pipeline_name,        # noqa: SLF001
        pipeline_root=os.path.join(root, "pipeline"), data_root=data, module_file=module_file,
        serving_model_dir=os.path.join(root, "serving"), metadata_path=os.path.join(root, "metadata.db"),
        beam_pipeline_args=beam_args))


@contextlib.contextmanager
def _heartbeat(what: str, memory: C.PeakChildrenRss, every: float = 30.0):
    """A log line every ``every`` seconds while a run goes on (its output is captured until it ends)."""
    done = threading.Event()
    started = time.monotonic()

    def beat() -> None:
        while not done.wait(every):
            C.log(f"  {what}: {time.monotonic() - started:.0f} s, peak RSS so far {memory.peak_gib:.2f} GiB")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=5)


def component_rows(metadata_path: Path, pipeline_name: str, memory: C.PeakChildrenRss) -> list[dict]:
    from pipeline.results import mlmd

    store = mlmd.open_store(mlmd.sqlite_config(str(metadata_path)))
    rows = []
    for node in sorted(mlmd.latest_run(store, pipeline_name).values(), key=lambda n: n.execution.id):
        start = node.execution.create_time_since_epoch / 1000
        end = node.execution.last_update_time_since_epoch / 1000
        peak = memory.peak_gib_between(start, end)
        rows.append({"node": node.node_id, "component": node.node_id.split(".")[0], "state": node.state,
                     "seconds": round(node.seconds, 1), "start": start, "end": end,
                     "peak_rss_gib": None if peak is None else round(peak, 2),
                     "evaluation": mlmd.first_uri(node.outputs, "evaluation")})
    return rows


def accuracy(rows: list[dict]) -> float | None:
    from artifacts import tfma_results

    for row in rows:
        if row["component"] == "Evaluator" and row["evaluation"]:
            metrics = tfma_results.overall_metrics(row["evaluation"])
            value = metrics.get("sparse_categorical_accuracy", metrics.get("accuracy"))
            return None if value is None else round(float(value), 4)
    return None


def run_one(kind: str, mode: str, png: Path, records: Path, count: int, work: Path, args) -> dict[str, Any]:
    """One run in a fresh process; for the project, ``mode`` is its extra flags ("" = the defaults)."""
    label = mode if kind == "example" else (mode.replace("--", "").replace(" ", "_") or "default")
    root = work / f"run-{count}-{kind}-{label}"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    read_once(records if kind == "example" else png)
    env = dict(os.environ)
    if kind == "example":
        cmd = [C.PYTHON, str(Path(__file__).resolve()), "--run-example", str(records), str(root), mode, "-"]
        env["TF_USE_LEGACY_KERAS"] = "1"
        metadata, pipeline_name = root / "metadata.db", EXAMPLE_PIPELINE
    else:
        cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", "cnn", "--data", str(png), "--output", str(root),
               *mode.split()]
        from pipeline.results import mlmd

        metadata, pipeline_name = root / mlmd.METADATA_FILE, PROJECT_PIPELINE
    C.log(f"{count:,} images, {kind} ({label}): {C.shell_command(cmd)}")
    load = C.loadavg()
    with C.PeakChildrenRss(interval=0.5) as memory, _heartbeat(f"{kind} ({label})", memory):
        out = C.run_timed(cmd, timeout=args.timeout, env=env, log_path=work / f"run-{count}-{kind}-{label}.log")
    result: dict[str, Any] = {"size": count, "kind": kind, "mode": mode, "label": label,
                              "command": C.shell_command(cmd), "wall_s": round(out["wall_s"], 1),
                              "returncode": out["returncode"],
                              "peak_rss_gib": round(memory.peak_gib, 2), "loadavg_before": load,
                              "loadavg_after": C.loadavg()}
    try:
        rows = component_rows(metadata, pipeline_name, memory)
        result["accuracy"] = accuracy(rows)
        result["components"] = [{k: v for k, v in r.items() if k != "evaluation"} for r in rows]
    except Exception as error:  # noqa: BLE001 - a failed run still reports its wall time
        result["components"], result["mlmd_error"] = [], f"{type(error).__name__}: {error}"
    C.log(f"  exit {out['returncode']}, {result['wall_s']} s, peak {result['peak_rss_gib']} GiB, "
          f"accuracy {result.get('accuracy')}")
    return result


# -------------------------------------------------------------------------------- tables

COMPONENTS = ("ImportExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform", "Trainer",
              "Evaluator", "Pusher")


def by_component(result: dict) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for row in result.get("components", []):
        seconds[row["component"]] = seconds.get(row["component"], 0.0) + row["seconds"]
    return seconds


def print_size(results: list[dict], count: int) -> dict[str, Any]:
    runs = [r for r in results if r["size"] == count]
    projects = [r for r in runs if r["kind"] == "project"]
    examples = [r for r in runs if r["kind"] == "example"]
    names = list(COMPONENTS) + sorted({c for r in runs for c in by_component(r)} - set(COMPONENTS))
    rounds = sorted({r.get("round", 1) for r in runs})
    named = (lambda r: f"{r['kind']} ({r['label']})") if len(rounds) == 1 else \
        (lambda r: f"{r['kind']} ({r['label']}) #{r.get('round', 1)}")
    headers = ["component"] + [named(r) for r in runs]
    rows: list[list[Any]] = [[n] + [by_component(r).get(n) for r in runs] for n in names]
    rows.append(["whole process (wall)"] + [r["wall_s"] for r in runs])
    rows.append(["peak RSS GiB"] + [r["peak_rss_gib"] for r in runs])
    rows.append(["eval accuracy"] + ["-" if r.get("accuracy") is None else f"{r['accuracy']:.4f}" for r in runs])
    rows.append(["exit code"] + [r["returncode"] for r in runs])
    C.print_table(headers, rows, title=f"{count:,} images: seconds per component (MLMD)")
    ratios: dict[str, list[dict[str, float]]] = {}
    for project in projects:
        for ex in examples:
            if project.get("round", 1) != ex.get("round", 1):  # a ratio is taken within one round
                continue
            key = ex["mode"] if project["label"] == "default" else f"{project['label']} / {ex['mode']}"
            ratio = {"wall": round(C.ratio(project["wall_s"], ex["wall_s"]), 3),
                     "peak_rss": round(C.ratio(project["peak_rss_gib"], ex["peak_rss_gib"]), 3)}
            ratios.setdefault(key, []).append(ratio)
            within = "" if len(rounds) == 1 else f", round {project.get('round', 1)}"
            print(f"project ({project['label']}) / example ({ex['mode']}){within}: wall {ratio['wall']:.2f}x, "
                  f"peak RSS {ratio['peak_rss']:.2f}x, accuracy {project.get('accuracy')} vs {ex.get('accuracy')}",
                  flush=True)
    # One ratio per key, as a single round gives it (run_all.py reads "wall"); over rounds the median, with
    # each round's ratio beside it.
    summary: dict[str, Any] = {}
    for key, values in ratios.items():
        walls = sorted(v["wall"] for v in values)
        summary[key] = {"wall": statistics.median(walls),
                        "peak_rss": statistics.median(v["peak_rss"] for v in values)}
        if len(values) > 1:
            summary[key]["rounds"] = values
            print(f"project / example ({key}) over {len(walls)} rounds: wall median {summary[key]['wall']:.2f}x, "
                  f"spread {walls[0]:.2f}-{walls[-1]:.2f}x", flush=True)
    return summary


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.run_example:
        data, root, mode, _ = args.run_example
        run_example_here(data, root, mode)
        return 0
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    contention = C.Contention()
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    modes = [m.strip() for m in args.beam_mode.split(",") if m.strip()]
    only = {s.strip() for s in args.only.split(",")}
    plan = ([("example", modes[0])] if "example" in only and modes else []) + \
        ([("project", extra) for extra in args.project_args] if "project" in only else []) + \
        ([("example", m) for m in modes[1:]] if "example" in only else [])
    results, ratios = [], {}
    for count in sizes:
        started = time.monotonic()
        png, records = write_data(work / f"digits-{count}", count)
        read = read_once(png, records)
        C.log(f"{count:,} images ready in {time.monotonic() - started:.0f} s ({read / 2**20:,.0f} MiB, read again "
              "before each run, so that no run reads its input from disk and another from the page cache)")
        for round_ in range(1, max(args.repeat, 1) + 1):
            for kind, mode in plan:
                results.append({**run_one(kind, mode, png, records, count, work, args), "round": round_})
        ratios[str(count)] = print_size(results, count)
    C.write_json(NAME, {"results": results, "ratios": ratios}, args, machine, contention)
    return 0 if all(r["returncode"] == 0 for r in results) else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.TimeoutExpired as error:
        C.log(f"timed out: {error}")
        sys.exit(124)

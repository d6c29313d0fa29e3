"""The image ExampleGen beside its physical reference, interleaved in one run: files/s and the ratio.

- ``reference``: a plain loop that opens, reads and decodes the same files (``open``,
  ``read``, PIL decode to a numpy array): what any ingestion of these files must at least do;
- ``example-gen``: TFX's real executor (``components/image_example_gen.py``) on Beam's
  DirectRunner (``--mode``, default ``in_memory``), writing the train/eval GZIP TFRecords;
  timed inside a child process around ``Do`` alone (not the interpreter's start-up);
- ``example-gen@DIR`` (``--baseline DIR``): the same executor from another checkout (e.g.
  ``/work/main``), to show a change's effect in the same run;
- ``import-example-gen``: TFX's own ImportExampleGen executor on TFRecords of the same
  pixels (``tf.train.Example`` in this project's feature spec, 4 uncompressed shards, made
  once from the PNGs), same runner, same split and GZIP output, timed the same way: the
  speed of a TFX ExampleGen that decodes nothing.

Every example-gen round checks counts in = out (examples written = files) and stops with
exit code 1 otherwise. The folder is generated once (random 8x8 grayscale PNGs in 10
class folders, the issue's "small images") and reused.

    python benchmarks/bench_example_gen.py --files 20000 --rounds 3
    python benchmarks/bench_example_gen.py --files 20000 --baseline /work/main
    python benchmarks/bench_example_gen.py --quick
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_example_gen"


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--files", type=int, default=20_000)
    p.add_argument("--size", type=int, default=8, help="image side in pixels")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--mode", default="in_memory", choices=("in_memory", "multi_processing"))
    p.add_argument("--workers", type=int, default=2, help="multi_processing workers")
    p.add_argument("--baseline", default=None, help="another checkout whose executor runs beside this one")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/example_gen")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--code", default=str(C.PROJECT_ROOT), help=argparse.SUPPRESS)
    p.add_argument("--child-kind", default="image", help=argparse.SUPPRESS)
    p.add_argument("--no-import", action="store_true", help="leave out TFX's ImportExampleGen variant")
    return p.parse_args(argv)


def generate(folder: Path, count: int, size: int) -> list[Path]:
    import numpy as np
    from PIL import Image

    marker = folder / f".complete-{count}-{size}"
    if not marker.exists():
        shutil.rmtree(folder, ignore_errors=True)
        rng = np.random.default_rng(0)
        for i in range(count):
            target = folder / f"class{i % 10}"
            target.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (size, size), dtype=np.uint8)).save(target / f"{i:07d}.png")
        marker.touch()
    return sorted(folder.glob("*/*.png"))


def records_of(folder: Path, files: list[Path], shards: int = 4) -> Path:
    """TFRecords of the PNGs' pixels (decoded once, here), beside the folder."""
    import numpy as np
    from PIL import Image

    records = folder.parent / f"{folder.name}-tfrecords"
    marker = records / ".complete"
    if marker.exists():
        return records
    shutil.rmtree(records, ignore_errors=True)
    records.mkdir(parents=True)
    import stackenv  # noqa: F401  (the project's TF environment, before TensorFlow loads)

    import tensorflow as tf

    from data.images.writer import make_example

    writers = [tf.io.TFRecordWriter(str(records / f"images-{i:05d}-of-{shards:05d}.tfrecord")) for i in range(shards)]
    for i, path in enumerate(files):
        with Image.open(path) as image:
            pixels = np.asarray(image)[..., None]
        example = make_example(pixels, path.parent.name, int(path.parent.name[5:]), "medium",
                               path.relative_to(folder).as_posix())
        writers[i % shards].write(example.SerializeToString())
    for writer in writers:
        writer.close()
    (records / ".complete").touch()
    return records


def reference(files: list[Path]) -> int:
    """Open, read and decode every file: the physical floor of any ingestion of them."""
    import numpy as np
    from PIL import Image

    for path in files:
        with open(path, "rb") as handle:
            data = handle.read()
        with Image.open(io.BytesIO(data)) as image:
            np.asarray(image)
    return len(files)


def child(data: Path, out: Path, size: int, mode: str, workers: int, kind: str = "image") -> dict:
    """In a fresh process: the executor's ``Do`` timed alone, then the records counted.
    ``kind``: ``image`` (this project's, on the PNG folder) or ``import`` (TFX's ImportExampleGen on TFRecords)."""
    import stackenv  # noqa: F401

    import tensorflow as tf
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.proto import example_gen_pb2
    from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
    from tfx.utils import proto_utils

    import components.image_example_gen as under_test
    from components.image_example_gen import ImageExampleGenExecutor
    from components.ingest_config import settings_config

    output_config = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
        splits=[example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
                example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)],
        partition_feature_name="example_id"))
    pattern = "*.tfrecord" if kind == "import" else "*"
    input_config = example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="all", pattern=pattern)])
    examples = standard_artifacts.Examples()
    examples.uri = str(out)
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: str(data),
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(output_config),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
        standard_component_specs.CUSTOM_CONFIG_KEY: proto_utils.proto_to_json(
            settings_config(image_size=size, channels=1)),
    }
    beam_args = [f"--direct_running_mode={mode}"] + ([f"--direct_num_workers={workers}"] if mode != "in_memory" else [])
    assert Path(under_test.__file__).resolve().is_relative_to(Path(sys.path[0]).resolve()), under_test.__file__
    if kind == "import":
        from tfx.components.example_gen.import_example_gen.executor import Executor as ImportExecutor

        del exec_properties[standard_component_specs.CUSTOM_CONFIG_KEY]
        executor = ImportExecutor(BaseBeamExecutor.Context(beam_pipeline_args=beam_args))
    else:
        executor = ImageExampleGenExecutor(BaseBeamExecutor.Context(beam_pipeline_args=beam_args))
    started, cpu = time.perf_counter(), time.process_time()
    executor.Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, exec_properties)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    written = 0
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
        written += sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))
    return {"seconds": seconds, "cpu_seconds": cpu, "written": written}


def run_child(code: Path, data: Path, out: Path, args, kind: str = "image") -> dict:
    shutil.rmtree(out, ignore_errors=True)
    cmd = [C.PYTHON, str(Path(__file__).resolve()), "--child", str(data), "--work-dir", str(out),
           "--size", str(args.size), "--mode", args.mode, "--workers", str(args.workers),
           "--code", str(code), "--child-kind", kind]
    env = {**os.environ, "PYTHONPATH": str(code)}
    process = subprocess.run(cmd, cwd=str(code), env=env, capture_output=True, text=True, timeout=6 * 3600)
    if process.returncode != 0:
        raise SystemExit(f"example-gen ({code}) failed:\n{process.stderr[-3000:]}")
    return json.loads(process.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child:
        # The executor of the checkout under test (``--code``), not this script's checkout.
        sys.path = [p for p in sys.path if Path(p or ".").resolve() != C.PROJECT_ROOT]
        sys.path.insert(0, args.code)
        print(json.dumps(child(Path(args.child), Path(args.work_dir), args.size, args.mode, args.workers,
                               args.child_kind)))
        return 0
    count, rounds = (1_000, 1) if args.quick else (args.files, args.rounds)
    work = Path(args.work_dir)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    folder = work / f"images-{count}-{args.size}"
    C.log(f"generating {count:,} {args.size}x{args.size} PNG files in {folder}")
    files = generate(folder, count, args.size)
    contention = C.Contention()
    codes = {"example-gen": C.PROJECT_ROOT}
    if args.baseline:
        codes[f"example-gen@{args.baseline}"] = Path(args.baseline).resolve()
    mismatches = []

    def step(name: str, code: Path, data: Path = folder, kind: str = "image"):
        def run() -> float:
            result = run_child(code, data, work / "out", args, kind)
            if result["written"] != len(files):
                mismatches.append((name, result["written"]))
            return result["seconds"]
        return run

    variants = {"reference": lambda: reference(files) and None,
                **{name: step(name, code) for name, code in codes.items()}}
    if not args.no_import:
        C.log(f"TFRecords of the same pixels for ImportExampleGen beside {folder}")
        variants["import-example-gen"] = step("import-example-gen", C.PROJECT_ROOT, records_of(folder, files), "import")
    samples = C.interleave(variants, rounds, warmup=0 if args.quick else 1,
                           on_round=lambda r, t: C.log(f"round {r + 1}: " + ", ".join(
                               f"{n} {C.rate(len(files), s):,.0f} files/s" for n, s in t.items())))
    ref = samples["reference"]
    rows = [[name, len(files), C.fmt(C.median(s)), C.fmt(C.rate(len(files), C.median(s))),
             C.fmt(C.ratio(C.median(ref), C.median(s))), C.fmt(C.paired_ratio(ref, s))]
            for name, s in samples.items()]
    C.print_table(["variant", "files", "median s", "files/s", "speed / reference (medians)",
                   "speed / reference (paired)"], rows,
                  title=f"Image ExampleGen ({args.mode}) beside a plain open+read+decode loop, {rounds} rounds")
    for name, other in [(n, "example-gen") for n in samples if n not in ("reference", "example-gen")]:
        print(f"example-gen speed / {name} speed: {C.fmt(C.ratio(C.median(samples[name]), C.median(samples[other])))}"
              f" (medians), {C.fmt(C.paired_ratio(samples[name], samples[other]))} (paired)")
    if mismatches:
        print(f"COUNTS DIFFER (files {len(files)}): {mismatches}")
    C.write_json(NAME, {"files": len(files), "samples_s": samples, "mismatches": mismatches}, args, machine,
                 contention)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

"""Trainer input: ``make_dataset(parallel=True, cache=True)`` vs the naive pipeline, side by side.

The same CNN-transformed examples (``image_xf`` float[64], ``label_xf`` int64[1], GZIP
TFRecords, the Transform output's feature spec) are read with:

- ``trainer``  make_dataset(parallel=True,  cache=True)   what models/*/trainer.py uses: the
  split parsed once into memory, per-epoch permutation, gathered per chunk, rebatched
- ``naive``    make_dataset(parallel=False, cache=False)  sequential reads, no cache/prefetch
- ``streaming`` parallel=True, cache=True, memory_budget_bytes=0: the Trainer's streaming
  path (cache of serialized records, shuffle buffer, parse after batch, prefetch), i.e. the
  Trainer's input before the in-memory path, and its fallback above the memory budget
- ``parallel_nocache``  parallel=True, cache=False        isolates interleave/parallel map
- ``sequential_cache``  parallel=False, cache=True        in memory, no threads, no prefetch

Every measurement includes building the dataset (the in-memory load happens there).

for a Trainer-like number of epochs (``--epochs``, default 15 as the CNN default), over
three storage layouts:

- ``transform-1file``: ONE shard, exactly as TFX Transform writes the digits today;
- ``sharded``: the same examples in ``--shards`` files (default 16);
- ``slow-storage``: the sharded files behind a simulated per-file open latency
  (``--latency-ms``, a ``tf.py_function(time.sleep)`` before each file is read, like an
  object store's time-to-first-byte), where parallel interleave has something to hide.
  ``parallel_cl16`` adds interleave with cycle_length=16 to the streaming path (which uses
  AUTOTUNE: as many files in flight as cores; the in-memory load reads up to 16 at once).

``trainer_block256`` (all file cases) is the streaming pipeline with one earlier candidate
fix: each file's reader yields blocks of 256 records (``.batch(256)`` inside the interleave,
``.unbatch()`` after), so the parallel interleave's per-element hand-over is paid per block.

and, end to end, ``cnn-fit``: the real digits CNN (``build_cnn``) trained with ``fit`` for
15 passes x 23 steps (the CNN's --epochs bound; a default run's step budget follows the data,
docs/cli.md) on exactly the default train split size in one
file, fed by ``trainer`` vs ``streaming`` vs ``naive`` input: does the input pipeline change
training speed?

Examples are the bundled digits (transformed exactly as the CNN preprocessing_fn does:
pixels / 255, label id), repeated ``--copies`` times; or, with ``--output RUN_DIR``, the
train split the real Transform wrote in that pipeline run (re-sharded for ``sharded``).

Variants are interleaved per round (see _common.py); examples/s are medians of rounds.

    .venv/bin/python benchmarks/bench_input.py            # ~4 min on 2 cores
    .venv/bin/python benchmarks/bench_input.py --quick    # seconds
"""
from __future__ import annotations

import contextlib
import glob
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_input"
VARIANTS = {
    # name: (parallel, cache, memory_budget_bytes: None = make_dataset's default, 0 = streaming)
    "trainer": (True, True, None),
    "naive": (False, False, None),
    "streaming": (True, True, 0),
    "parallel_nocache": (True, False, None),
    "sequential_cache": (False, True, None),
}


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--output", default=None, help="a pipeline run dir (--output of `pipeline run`) "
                   "whose Transform output to read instead of generating examples")
    p.add_argument("--copies", type=int, default=8, help="repeat the digits train split N times "
                   "(default %(default)s: ~11.6k examples)")
    p.add_argument("--shards", type=int, default=16)
    p.add_argument("--epochs", type=int, default=15, help="passes per measurement (the CNN's "
                   "--epochs bound; a default run's step budget follows the data: docs/cli.md)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--latency-ms", type=float, default=50.0, help="simulated per-file open latency")
    p.add_argument("--slow-epochs", type=int, default=3, help="passes in the slow-storage case")
    p.add_argument("--work-dir", default=None, help="where to write the TFRecords (default: a temp dir)")
    p.add_argument("--skip-tf-keras-autograph", action="store_true",
                   help="skip AutoGraph over tf_keras (see bench_train_step; saves ~12 s of the first "
                   "fit; always on with --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.copies, args.epochs, args.rounds, args.slow_epochs, args.shards = 1, 2, 2, 1, 8
        args.latency_ms = min(args.latency_ms, 20.0)
        args.skip_tf_keras_autograph = True
    return args


# --------------------------------------------------------------------------- data


def transformed_examples(args, tf):
    """[(image_xf float[64], label_xf int)] and the feature spec."""
    from models.cnn import features

    if args.output:
        import tensorflow_transform as tft

        graphs = sorted(glob.glob(os.path.join(args.output, "tfx", "*", "Transform", "transform_graph", "*")))
        if not graphs:
            raise SystemExit(f"No Transform output under {args.output}/tfx/*/Transform")
        from models.common import raw_examples
        from models.common.inputs import load_split

        # The CNN's Transform writes no examples: the Trainer reads ExampleGen's through the graph, as here.
        output, keys = tft.TFTransformOutput(graphs[-1]), (features.IMAGE_XF, features.LABEL_XF)
        spec = {key: value for key, value in output.transformed_feature_spec().items() if key in keys}
        run_root = os.path.dirname(os.path.dirname(os.path.dirname(graphs[-1])))
        examples = sorted(glob.glob(os.path.join(run_root, "ImportExampleGen", "examples", "*")))[-1]
        raw_spec, transform = raw_examples.reader(output, features.RAW_INPUTS, keys)
        data = load_split(os.path.join(examples, "Split-train", "*"), raw_spec, 1 << 40, transform)
        rows = list(zip(data[features.IMAGE_XF].tolist(), data[features.LABEL_XF].reshape(-1).tolist()))
        return rows, spec, f"ExampleGen output of {args.output} through its transform graph (train split)"

    import numpy as np
    from sklearn.datasets import load_digits

    digits = load_digits()
    # Same numbers as data/images/digits.py (0..16 -> 0..255 uint8) then preprocessing_fn (/255).
    pixels = np.rint(np.clip(digits.images, 0, 16) * 255.0 / 16.0).astype(np.uint8)
    images = (pixels.reshape(len(pixels), -1).astype(np.float32) / 255.0).tolist()
    rows = list(zip(images, (int(t) for t in digits.target)))
    rows = rows[: int(len(rows) * 0.81)]  # ~ the train split's size (4:1 hash split)
    spec = {features.IMAGE_XF: tf.io.FixedLenFeature([64], tf.float32),
            features.LABEL_XF: tf.io.FixedLenFeature([1], tf.int64)}
    return rows, spec, "bundled digits, transformed as models/cnn/preprocessing.py does"


def write_shards(rows, copies: int, directory: Path, shards: int, tf) -> list:
    from models.cnn import features

    directory.mkdir(parents=True, exist_ok=True)
    paths = [str(directory / f"transformed_examples-{i:05d}-of-{shards:05d}.gz") for i in range(shards)]
    writers = [tf.io.TFRecordWriter(p, options="GZIP") for p in paths]
    n = 0
    for _ in range(copies):
        for image, label in rows:
            ex = tf.train.Example(features=tf.train.Features(feature={
                features.IMAGE_XF: tf.train.Feature(float_list=tf.train.FloatList(value=image)),
                features.LABEL_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
            }))
            writers[n % shards].write(ex.SerializeToString())
            n += 1
    for w in writers:
        w.close()
    return paths


# ------------------------------------------------------------------ slow storage


@contextlib.contextmanager
def slow_tfrecord_files(latency_s: float, tf):
    """Make every ``tf.data.TFRecordDataset(path)`` pay ``latency_s`` before its first record.

    make_dataset builds its reader as ``tf.data.TFRecordDataset(path, ...)``, so patching the
    class name for the duration of dataset construction measures the project's own code.
    """
    real = tf.data.TFRecordDataset

    def wait(path):
        time.sleep(latency_s)  # releases the GIL, like a blocking network read
        return path

    def slow(filenames, compression_type=None, *a, **kw):
        delayed = tf.data.Dataset.from_tensors(filenames).map(
            lambda p: tf.py_function(wait, [p], tf.string))
        return delayed.flat_map(lambda p: real(p, compression_type, *a, **kw))

    tf.data.TFRecordDataset = slow
    try:
        yield
    finally:
        tf.data.TFRecordDataset = real


def interleave_variant(files, spec, label_key, batch, seed, tf, cycle_length=None, block=None):
    """make_dataset(parallel=True, cache=True) with one change to its interleave:

    ``cycle_length``: files in flight (make_dataset: AUTOTUNE = the core count);
    ``block``: each file's reader yields blocks of ``block`` records, unbatched after the
    interleave, so the parallel interleave hands over 1 element per block instead of per record.
    """
    ds = tf.data.Dataset.list_files(files, shuffle=True, seed=seed)

    def read(path):
        records = tf.data.TFRecordDataset(path, compression_type="GZIP")
        return records.batch(block) if block else records

    ds = ds.interleave(read, cycle_length=cycle_length, num_parallel_calls=tf.data.AUTOTUNE,
                       deterministic=True)
    if block:
        ds = ds.unbatch()
    ds = ds.cache().shuffle(10_000, seed=seed).repeat().batch(batch, drop_remainder=True)

    def parse(serialized):
        f = tf.io.parse_example(serialized, dict(spec))
        return f, f.pop(label_key)

    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)


# -------------------------------------------------------------------- measuring


def consume(dataset, steps: int) -> int:
    n = 0
    for features, _ in dataset.take(steps):
        n += 1
    return n


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)

    import stackenv  # noqa: F401

    import tensorflow as tf

    from models.cnn import features
    from models.common.inputs import make_dataset

    if args.skip_tf_keras_autograph:
        C.skip_autograph_for_tf_keras()

    rows, spec, source = transformed_examples(args, tf)
    work = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="bench-input-"))
    one_file = write_shards(rows, args.copies, work / "one", 1, tf)
    sharded = write_shards(rows, args.copies, work / "sharded", args.shards, tf)
    n_examples = len(rows) * args.copies
    steps_per_epoch = n_examples // args.batch_size
    C.log(f"{n_examples} examples ({source}), {steps_per_epoch} batches of {args.batch_size} per "
          f"epoch; files in {work}")

    def variant(files, parallel, cache, budget, epochs, latency_s=0.0, cycle_length=None, block=None):
        steps = epochs * steps_per_epoch

        def run():
            started = time.perf_counter()
            ctx = slow_tfrecord_files(latency_s, tf) if latency_s else contextlib.nullcontext()
            with ctx:  # the reader is built (traced) inside; it runs after
                if cycle_length or block:
                    ds = interleave_variant(files, spec, features.LABEL_XF, args.batch_size, 42, tf,
                                            cycle_length=cycle_length, block=block)
                else:
                    ds = make_dataset(files, spec, features.LABEL_XF, args.batch_size, seed=42,
                                      parallel=parallel, cache=cache, memory_budget_bytes=budget)
                it = iter(ds.take(steps))
            got = sum(1 for _ in it)
            assert got == steps, (got, steps)
            return time.perf_counter() - started

        return run

    def local_variants(files):
        out = {k: variant(files, p, c, b, args.epochs) for k, (p, c, b) in VARIANTS.items()}
        out["trainer_block256"] = variant(files, True, True, 0, args.epochs, block=256)
        return out

    cases = {"transform-1file": (local_variants(one_file), args.epochs),
             "sharded": (local_variants(sharded), args.epochs)}
    def fit_variant(parallel, cache, budget, model):
        steps_per_epoch = -(-len(rows) // args.batch_size)  # as the Trainer: ceil(train / batch)

        def run():
            ds = make_dataset(fit_file, spec, features.LABEL_XF, args.batch_size, seed=42,
                              parallel=parallel, cache=cache, memory_budget_bytes=budget)
            started = time.perf_counter()
            model.fit(ds, epochs=args.epochs, steps_per_epoch=steps_per_epoch, verbose=0)
            return time.perf_counter() - started

        return run

    from models.cnn.model import build_cnn

    fit_file = write_shards(rows, 1, work / "fit", 1, tf)
    tf.keras.utils.set_random_seed(42)
    fit_models = {k: build_cnn((8, 8, 1), 10) for k in ("trainer", "streaming", "naive")}

    latency_s = args.latency_ms / 1000
    slow = {k: variant(sharded, p, c, b, args.slow_epochs, latency_s) for k, (p, c, b) in VARIANTS.items()}
    slow["parallel_cl16"] = variant(sharded, True, True, 0, args.slow_epochs, latency_s, cycle_length=16)
    slow["trainer_block256"] = variant(sharded, True, True, 0, args.slow_epochs, latency_s, block=256)
    cases["slow-storage"] = (slow, args.slow_epochs)
    cases["cnn-fit"] = ({k: fit_variant(*VARIANTS[k], fit_models[k]) for k in fit_models}, args.epochs)

    results = {}
    rows_out = []
    for case, (variants, epochs) in cases.items():
        C.log(f"case {case}: {len(variants)} variants x {args.rounds} interleaved rounds, {epochs} epochs each")
        samples = C.interleave(variants, rounds=args.rounds, warmup=1)
        per_epoch = -(-len(rows) // args.batch_size) if case == "cnn-fit" else steps_per_epoch
        examples = epochs * per_epoch * args.batch_size
        case_result = {"epochs": epochs, "examples_per_measurement": examples, "variants": {}}
        for name, secs in samples.items():
            eps = [examples / s for s in secs]
            case_result["variants"][name] = {"seconds": C.summarize(secs), "examples_per_s": C.summarize(eps),
                                             "samples_s": secs}
        base = samples["naive"]
        for name, secs in samples.items():
            speedup = C.ratio(C.median(base), C.median(secs))
            paired = C.paired_ratio(base, secs)
            case_result["variants"][name]["speedup_vs_naive"] = speedup
            case_result["variants"][name]["speedup_vs_naive_paired"] = paired
            rows_out.append([case, name, C.median(secs), examples / C.median(secs), speedup, paired])
        trainer = case_result["variants"]["trainer"]
        case_result["trainer_vs_naive_speedup"] = trainer["speedup_vs_naive"]
        case_result["trainer_vs_naive_speedup_paired"] = trainer["speedup_vs_naive_paired"]
        case_result["trainer_vs_streaming_speedup_paired"] = C.paired_ratio(samples["streaming"],
                                                                            samples["trainer"])
        results[case] = case_result

    C.print_table(["case", "variant", "median s", "examples/s", "x naive (medians)", "x naive (paired)"],
                  rows_out, title=f"\nTrainer input, {n_examples} examples/epoch, batch {args.batch_size}, "
                  f"{args.rounds} interleaved rounds (higher x = faster)")
    ratio = results["transform-1file"]["trainer_vs_naive_speedup"]
    paired = results["transform-1file"]["trainer_vs_naive_speedup_paired"]
    print(f"\ntrainer vs naive on Transform's layout: {ratio:.2f}x (paired {paired:.2f}x; target >= 2x: "
          f"{'met' if min(ratio, paired) >= 2 else 'MISSED'}); sharded: "
          f"{results['sharded']['trainer_vs_naive_speedup']:.2f}x; slow storage: "
          f"{results['slow-storage']['trainer_vs_naive_speedup']:.2f}x; training the digits CNN (fit, "
          f"{args.epochs} epochs): {results['cnn-fit']['trainer_vs_naive_speedup']:.2f}x")
    print("trainer vs streaming (the previous Trainer input), paired: " + "; ".join(
        f"{case} {r['trainer_vs_streaming_speedup_paired']:.2f}x" for case, r in results.items()))

    payload = {
        "source": source,
        "num_examples": n_examples,
        "batch_size": args.batch_size,
        "shards": args.shards,
        "latency_ms": args.latency_ms,
        "rounds": args.rounds,
        "cases": results,
        "summary": {
            "trainer_vs_naive_transform_layout": ratio,
            "trainer_vs_naive_transform_layout_paired": paired,
            "trainer_vs_naive_sharded": results["sharded"]["trainer_vs_naive_speedup"],
            "trainer_vs_naive_slow_storage": results["slow-storage"]["trainer_vs_naive_speedup"],
            "trainer_vs_naive_cnn_fit": results["cnn-fit"]["trainer_vs_naive_speedup"],
            "trainer_vs_streaming_paired": {c: r["trainer_vs_streaming_speedup_paired"]
                                            for c, r in results.items()},
            "trainer_examples_per_s": results["transform-1file"]["variants"]["trainer"]["examples_per_s"]["median"],
            "naive_examples_per_s": results["transform-1file"]["variants"]["naive"]["examples_per_s"]["median"],
            "target_ratio": 2.0,
            "target_met": min(ratio, paired) >= 2.0,
        },
    }
    C.write_json(NAME, payload, args, machine, contention)
    if not args.work_dir:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

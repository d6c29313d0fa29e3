"""Train-step speed: eager vs tf.function graph vs XLA (jit_compile), side by side, per model.

Models are built with the project's own builders (``models.cnn.model.build_cnn``,
``models.seq2seq.model.build_seq2seq`` with ``models.seq2seq.trainer.MODEL_DEFAULTS``);
only the ``compile()`` flags differ between variants:

- ``eager``    compile(run_eagerly=True)
- ``graph``    compile() as the builders do (a tf.function train step) - the pipeline default
- ``xla``      compile(jit_compile=True)                                - ``--xla``
- ``graph_mirrored``  graph, built and run under MirroredStrategy (the pipeline's default
               ``--strategy mirrored``; on a CPU-only machine it has 1 replica)
- ``graph_one_device``  graph under ``OneDeviceStrategy`` on that device: the same one replica
               without MirroredStrategy's per-device iterator (measured, not faster: the log)

Batches are synthetic but shaped like the Transform output (CNN: ``image_xf`` float[64] for
the 8x8x1 digits, plus a 32x32x3 CNN as for image folders/CIFAR; seq2seq: 32 context and 8
target token ids, right-padded, vocab ``--vocab``). Steps run on a
repeated in-memory batch (the model's own ``train_function``, i.e. ``fit``'s per-step call,
minus input) for a calibrated number of steps per round, after a warm-up whose time (trace/compile + first steps) is reported separately:
for a short run the compile cost decides, so the break-even step count is reported too.

    .venv/bin/python benchmarks/bench_train_step.py          # ~3-4 min on 2 cores
    .venv/bin/python benchmarks/bench_train_step.py --quick  # seconds
"""
from __future__ import annotations

import argparse
import contextlib
import inspect
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_train_step"
MODES = ("eager", "graph", "xla", "graph_mirrored", "graph_one_device")
DISTRIBUTED = ("graph_mirrored", "graph_one_device")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--models", default="cnn,cnn32,seq2seq",
                   help="comma list of cnn (8x8x1 digits), cnn28 (28x28x1, the TFX example's digits), "
                        "cnn32 (32x32x3), seq2seq")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--vocab", type=int, default=3170, help="seq2seq output size (the default "
                   "corpus gives ~3.2k tokens with --vocab-size 4000)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--block-seconds", type=float, default=0.6,
                   help="target duration of one variant's timed block per round")
    p.add_argument("--pipeline-steps", type=int, nargs=2, default=(345, 1179), metavar=("CNN", "SEQ2SEQ"),
                   help="steps a default pipeline run trains (for the end-to-end estimate)")
    p.add_argument("--cold-start-rounds", type=int, default=2,
                   help="rounds of the fresh-process first-fit A/B (AutoGraph on tf_keras); 0 skips it")
    p.add_argument("--skip-tf-keras-autograph", action="store_true",
                   help="apply the AutoGraph fix measured by the cold-start A/B in this process too "
                   "(saves the one-time first-fit cost; always on with --quick)")
    p.add_argument("--cold-start-child", choices=COLD_START_VARIANTS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.block_seconds, args.cold_start_rounds = 2, 0.1, 0
        args.skip_tf_keras_autograph = True
        if args.models == "cnn,cnn32,seq2seq":
            args.models = "cnn"
        if args.modes == ",".join(MODES):
            args.modes = "eager,graph,xla"
    return args


# ---------------------------------------------------------------- cold start (per process)

COLD_START_VARIANTS = ("default", "tf_keras_not_converted")


def cold_start_child(variant: str) -> None:
    """In a fresh process: import TF, build the digits CNN, time its first 2-step fit."""
    import json

    started = time.perf_counter()
    import stackenv  # noqa: F401

    import tensorflow as tf

    import_s = time.perf_counter() - started
    if variant == "tf_keras_not_converted":
        C.skip_autograph_for_tf_keras()
    args = argparse.Namespace(batch_size=64, vocab=100)
    build, (x, y, _) = make_model_and_batch("cnn", args, tf)
    tf.keras.utils.set_random_seed(42)
    model = build()
    ds = tf.data.Dataset.from_tensors((x, y)).repeat()
    started = time.perf_counter()
    model.fit(ds, steps_per_epoch=2, epochs=1, verbose=0)
    first_fit_s = time.perf_counter() - started
    started = time.perf_counter()
    history = model.fit(ds, steps_per_epoch=50, epochs=1, verbose=0)
    print("COLD_START_JSON " + json.dumps({"import_s": import_s, "first_fit_s": first_fit_s,
                                           "next_50_steps_s": time.perf_counter() - started,
                                           "loss": float(history.history["loss"][-1])}), flush=True)


def cold_start_ab(rounds: int):
    import json

    samples = {v: [] for v in COLD_START_VARIANTS}

    def child(variant):
        def run():
            out = C.run_timed([C.PYTHON, __file__, "--cold-start-child", variant], timeout=600)
            line = next((l for l in out["stdout"].splitlines() if l.startswith("COLD_START_JSON ")), None)
            if out["returncode"] != 0 or line is None:
                raise RuntimeError(f"cold-start child failed: {out['stderr'][-2000:]}")
            result = json.loads(line.split(" ", 1)[1])
            result["process_wall_s"] = out["wall_s"]
            samples[variant].append(result)
            return result["first_fit_s"]
        return run

    C.interleave({v: child(v) for v in COLD_START_VARIANTS}, rounds=rounds, warmup=0)
    summary = {}
    for v, runs in samples.items():
        summary[v] = {key: C.summarize([r[key] for r in runs]) for key in runs[0]} if runs else {}
        summary[v]["runs"] = runs
    d, n = samples["default"], samples["tf_keras_not_converted"]
    summary["first_fit_saving_s"] = C.median([r["first_fit_s"] for r in d]) - C.median([r["first_fit_s"] for r in n])
    summary["first_fit_ratio"] = C.paired_ratio([r["first_fit_s"] for r in n], [r["first_fit_s"] for r in d])
    return summary


@contextlib.contextmanager
def compile_overrides(tf, **overrides):
    """Add ``overrides`` to every ``Model.compile`` call (the builders compile internally)."""
    real = tf.keras.Model.compile

    def compile_(self, *a, **kw):
        kw.update(overrides)
        return real(self, *a, **kw)

    tf.keras.Model.compile = compile_
    try:
        yield
    finally:
        tf.keras.Model.compile = real


def _kwargs(fn, **candidates):
    params = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in params}


def make_model_and_batch(kind: str, args, tf):
    """(build() -> compiled model, (x, y, sample_weight) batch)."""
    import numpy as np

    rng = np.random.default_rng(0)
    b = args.batch_size
    if kind in ("cnn", "cnn28", "cnn32"):
        from models.cnn import features
        from models.cnn.model import build_cnn

        shape = {"cnn": (8, 8, 1), "cnn28": (28, 28, 1), "cnn32": (32, 32, 3)}[kind]
        x = {features.IMAGE_XF: tf.constant(rng.random((b, int(np.prod(shape))), dtype=np.float32))}
        y = tf.constant(rng.integers(0, 10, (b, 1)), tf.int64)
        return (lambda: build_cnn(shape, 10, 1e-3)), (x, y, None)

    from models.seq2seq import features
    from models.seq2seq import trainer as s2s_trainer
    from models.seq2seq.model import build_seq2seq

    ctx_len, tgt_len, vocab = 32, 8, args.vocab
    lengths = rng.integers(8, ctx_len + 1, b)
    context = rng.integers(3, vocab, (b, ctx_len))
    context[np.arange(ctx_len)[None, :] >= lengths[:, None]] = features.PAD_ID
    tgt_lengths = rng.integers(2, tgt_len + 1, b)
    target = rng.integers(3, vocab, (b, tgt_len))
    target[np.arange(tgt_len)[None, :] >= tgt_lengths[:, None]] = features.PAD_ID
    decoder = np.concatenate([np.full((b, 1), features.START_ID), target[:, :-1]], axis=1)
    x = {features.CONTEXT_XF: tf.constant(context, tf.int64),
         features.DECODER_INPUT_XF: tf.constant(decoder, tf.int64)}
    y = tf.constant(target, tf.int64)
    w = tf.cast(tf.not_equal(y, features.PAD_ID), tf.float32)
    hyper = dict(getattr(s2s_trainer, "MODEL_DEFAULTS", {}))
    lr = 2e-3

    def build():
        return build_seq2seq(vocab, ctx_len, tgt_len, **_kwargs(build_seq2seq, learning_rate=lr, **hyper))

    return build, (x, y, w)


class Variant:
    """One compiled model; ``run(steps)`` runs that many train steps and returns the seconds.

    Steps call the model's own ``train_function`` (what ``fit`` calls once per step) on one
    long-lived iterator, so a block measures the steps and not ``fit``'s per-call set-up
    (data handler, callbacks), which would otherwise dominate a small model's short block.
    """

    def __init__(self, kind, mode, build, batch, tf):
        from models.common.distribution import make_strategy, mirrored_devices

        self.kind, self.mode, self.tf = kind, mode, tf
        overrides = {"eager": {"run_eagerly": True}, "graph": {}, "xla": {"jit_compile": True},
                     "graph_mirrored": {}, "graph_one_device": {}}[mode]
        strategy = {"graph_mirrored": lambda: make_strategy("mirrored"),
                    "graph_one_device": lambda: tf.distribute.OneDeviceStrategy(mirrored_devices()[0])}.get(
                        mode, tf.distribute.get_strategy)()
        tf.keras.utils.set_random_seed(42)
        started = time.perf_counter()
        with compile_overrides(tf, **overrides), strategy.scope():
            self.model = build()
        x, y, w = batch
        data = (x, y) if w is None else (x, y, w)
        dataset = tf.data.Dataset.from_tensors(data).repeat()
        if mode in DISTRIBUTED:
            dataset = strategy.experimental_distribute_dataset(dataset)
        self.iterator = iter(dataset)
        self.train_function = self.model.make_train_function()
        self.build_s = time.perf_counter() - started
        started = time.perf_counter()
        self.run(2)  # trace / XLA-compile + 2 steps
        self.first_call_s = time.perf_counter() - started
        self.steps = 1

    def run(self, steps: int) -> float:
        started = time.perf_counter()
        logs = None
        for _ in range(steps):
            logs = self.train_function(self.iterator)
        float(self.tf.nest.flatten(logs)[0])  # make sure the last step has finished
        return time.perf_counter() - started

    def calibrate(self, block_seconds: float) -> None:
        per_step = max(self.run(3) / 3, 1e-5)
        self.steps = int(min(5000, max(2, block_seconds / per_step)))

    def timed_block(self) -> float:
        return self.run(self.steps)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cold_start_child:
        cold_start_child(args.cold_start_child)
        return 0
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)

    import stackenv  # noqa: F401

    import tensorflow as tf

    if args.skip_tf_keras_autograph:
        C.skip_autograph_for_tf_keras()
    # The first fit of a process pays a one-time AutoGraph cost (tf_keras internals are
    # transpiled once per process); pay it on a throwaway model so no variant carries it.
    started = time.perf_counter()
    warm = tf.keras.Sequential([tf.keras.Input((4,)), tf.keras.layers.Dense(2)])
    warm.compile(optimizer="adam", loss="mse")
    warm.fit(tf.zeros([8, 4]), tf.zeros([8, 2]), epochs=1, verbose=0)
    process_first_fit_s = time.perf_counter() - started
    C.log(f"first fit of this process (one-time AutoGraph work, throwaway model): {process_first_fit_s:.1f} s")
    del warm

    modes = [m for m in args.modes.split(",") if m]
    kinds = [k for k in args.models.split(",") if k]
    results, rows = {}, []
    for kind in kinds:
        build, batch = make_model_and_batch(kind, args, tf)
        variants, errors = {}, {}
        for mode in modes:
            C.log(f"{kind}: building + first call ({mode})")
            try:
                variants[mode] = Variant(kind, mode, build, batch, tf)
                variants[mode].calibrate(args.block_seconds)
            except Exception as error:  # noqa: BLE001 - a mode that cannot run is a result too
                errors[mode] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
                variants.pop(mode, None)
                C.log(f"{kind}/{mode} failed: {errors[mode]}")
        # Steps per block differ per variant (calibrated); the time per STEP is what we compare.
        per_step = C.interleave({m: (lambda v=v: v.timed_block() / v.steps) for m, v in variants.items()},
                                rounds=args.rounds, warmup=0)
        kind_result = {"batch_size": args.batch_size, "modes": {}, "errors": errors,
                       "params": int(next(iter(variants.values())).model.count_params()) if variants else None}
        graph = per_step.get("graph")
        pipeline_steps = args.pipeline_steps[1] if kind == "seq2seq" else args.pipeline_steps[0]
        for mode, secs in per_step.items():
            v = variants[mode]
            sps = [1 / s for s in secs]
            entry = {
                "steps_per_s": 1 / C.median(secs),           # = 1 / median step time
                "steps_per_s_rounds": C.summarize(sps),
                "examples_per_s": args.batch_size / C.median(secs),
                "step_ms": C.summarize([s * 1000 for s in secs]),
                "steps_per_block": v.steps,
                "build_s": v.build_s,
                "first_call_s": v.first_call_s,
                "speedup_vs_graph": C.ratio(C.median(graph), C.median(secs)) if graph else None,
                "speedup_vs_graph_paired": C.paired_ratio(graph, secs) if graph else None,
                # first call + the rest of a default pipeline run's steps at the median speed
                "est_pipeline_training_s": v.first_call_s + (pipeline_steps - 2) * C.median(secs),
            }
            kind_result["modes"][mode] = entry
            rows.append([kind, mode, entry["steps_per_s"], entry["step_ms"]["median"], entry["speedup_vs_graph"],
                         entry["speedup_vs_graph_paired"], v.first_call_s, entry["est_pipeline_training_s"]])
        for mode, err in errors.items():
            rows.append([kind, mode, None, None, None, None, None, None])
        if graph and "xla" in per_step:
            g, x = C.median(graph), C.median(per_step["xla"])
            extra = variants["xla"].first_call_s - variants["graph"].first_call_s
            # steps after which XLA's extra compile time is paid back (0: XLA is never behind)
            kind_result["xla_break_even_steps"] = (max(0.0, extra / (g - x))) if g > x else None
        fastest_steady = min(per_step, key=lambda m: C.median(per_step[m])) if per_step else None
        fastest_run = min(kind_result["modes"], key=lambda m: kind_result["modes"][m]["est_pipeline_training_s"]) \
            if kind_result["modes"] else None
        kind_result["winner_steady_state"] = fastest_steady
        kind_result["winner_for_pipeline_run"] = fastest_run
        kind_result["pipeline_steps"] = pipeline_steps
        results[kind] = kind_result
        for v in variants.values():
            del v.model
        tf.keras.backend.clear_session()

    C.print_table(["model", "mode", "steps/s", "ms/step", "x graph", "x graph (paired)", "first call s",
                   "est. train s (default run)"], rows,
                  title=f"\nTrain step, batch {args.batch_size}, {args.rounds} interleaved rounds "
                  f"(x graph > 1 = faster than the default tf.function step)")
    for kind, r in results.items():
        be = r.get("xla_break_even_steps")
        print(f"{kind}: fastest per step: {r['winner_steady_state']}; fastest for a default pipeline run "
              f"({r['pipeline_steps']} steps, incl. compile): {r['winner_for_pipeline_run']}"
              + (f"; XLA pays off after ~{be:.0f} steps" if be is not None else
                 ("; XLA never pays off (slower per step)" if "xla" in r["modes"] else ""))
              + (f"; failed: {r['errors']}" if r["errors"] else ""))
    print(f"first fit of this process (throwaway model): {process_first_fit_s:.1f} s"
          + (" (AutoGraph told to skip tf_keras)" if args.skip_tf_keras_autograph else
             " - one-time AutoGraph work over tf_keras that every Trainer process pays"))
    cold = None
    if args.cold_start_rounds:
        C.log(f"fresh-process first fit A/B: {args.cold_start_rounds} rounds x {len(COLD_START_VARIANTS)} processes")
        cold = cold_start_ab(args.cold_start_rounds)
        C.print_table(["fresh process, digits CNN", "import TF s", "first fit (2 steps) s", "next 50 steps s"],
                      [[v, cold[v]["import_s"]["median"], cold[v]["first_fit_s"]["median"],
                        cold[v]["next_50_steps_s"]["median"]] for v in COLD_START_VARIANTS],
                      title="\nFirst fit of a process: default vs AutoGraph told to skip tf_keras (medians)")
        print(f"skipping tf_keras in AutoGraph saves {cold['first_fit_saving_s']:.1f} s per process "
              f"(first fit {cold['first_fit_ratio']:.2f}x of default, paired)")
    C.write_json(NAME, {"models": results, "rounds": args.rounds,
                        "process_first_fit_s": process_first_fit_s,
                        "tf_keras_autograph_skipped": bool(args.skip_tf_keras_autograph),
                        "cold_start": cold},
                 args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

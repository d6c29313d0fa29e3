"""Serving latency and throughput of the pushed SavedModels, in process (tf.saved_model.load).

CNN: ``serving_default`` (serialized tf.Examples, the transform graph inside) and
``predict_image`` (float pixels) - p50/p99 latency at batch 1, examples/s at batch 64.
seq2seq: ``serving_default`` (next-token distribution) the same way, and ``generate``:
latency at ``max_new_tokens`` = 1 and 16 (greedy, batch 1); per-token latency =
(t16 - t1) / (decoder steps16 - steps1), steps counted from what was generated (with no
``stop_at`` the loop runs every step; of a few prompts, the one that runs longest is used),
plus a batch-64 16-token generate throughput.

First request after a load, in fresh processes (``--first-request-rounds``): load the
version, then time one ``serving_default`` request (and ``generate`` for seq2seq) either
right away or after replaying the export's TF Serving warm-up requests
(``assets.extra/tf_serving_warmup_requests``, models/common/warmup.py), which is what TF
Serving does before a version takes traffic.

Variants of one model are interleaved per round (order rotated); latencies pool all rounds.
This is the model's own compute in this Python process - no TF Serving, no network, no
request parsing - so it is a lower bound on what a TF Serving client would see.

Model dirs: ``--cnn-model-dir`` / ``--seq2seq-model-dir`` take a pipeline output dir, a
serving base dir (``serving/<model>``, the newest version is used) or a version dir. Without
them a short pipeline run (``--train-steps``) produces one in ``--work-dir``.

    .venv/bin/python benchmarks/bench_serving.py --cnn-model-dir output --seq2seq-model-dir output
    .venv/bin/python benchmarks/bench_serving.py --quick
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_serving"
PROMPTS = (  # greedy generation may stop early at the end token; the longest-running one is used
    "the for statement is used to iterate over the elements of a sequence such as a",
    "if the exception is not handled the",
    "a class definition defines a class object and the",
    "the import statement is executed in two steps first find a module and",
    "when a function is called the arguments are",
    "the with statement is used to wrap the execution of a block with methods defined by",
)


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--cnn-model-dir", default=None)
    p.add_argument("--seq2seq-model-dir", default=None)
    p.add_argument("--models", default="cnn,seq2seq")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--calls", type=int, default=200, help="batch-1 calls per variant per round")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--batch-calls", type=int, default=20, help="batch calls per variant per round")
    p.add_argument("--work-dir", default="/tmp/tfx-bench/serving")
    p.add_argument("--first-request-rounds", type=int, default=3,
                   help="fresh-process rounds of the first-request A/B (with vs without warm-up); 0 skips it")
    p.add_argument("--first-request-child", nargs=2, metavar=("MODEL_DIR", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.batch_calls, args.first_request_rounds = 2, 20, 3, 1
    return args


def resolve_model_dir(path: str, model: str) -> Path:
    """A version dir (holding saved_model.pb) from a run output, serving base or version dir."""
    p = Path(path)
    for candidate in (p, p / "serving" / model, p / model):
        if (candidate / "saved_model.pb").exists():
            return candidate
        if candidate.is_dir():
            versions = sorted((d for d in candidate.iterdir() if d.name.isdigit() and (d / "saved_model.pb").exists()),
                              key=lambda d: int(d.name))
            if versions:
                return versions[-1]
    raise SystemExit(f"No pushed {model} SavedModel found under {path}")


def train_quick_model(model: str, work: Path, quick: bool) -> Path:
    out = work / model
    steps = {"cnn": "20" if quick else "200", "seq2seq": "10" if quick else "100"}[model]
    cmd = [C.PYTHON, "-m", "pipeline", "run", "--model", model, "--output", str(out),
           "--train-steps", steps, "--min-accuracy", "0"]
    C.log(f"no --{model}-model-dir: training one: {C.shell_command(cmd)}")
    res = C.run_timed(cmd, timeout=1800, log_path=work / f"{model}-train.log")
    if res["returncode"] != 0:
        raise SystemExit(f"pipeline run for {model} failed: {res['stderr'][-2000:]}")
    return resolve_model_dir(str(out), model)


class Signature:
    """Times calls of one signature; keeps every per-call latency."""

    def __init__(self, fn, kwargs, calls, batch, tokens_fn=None):
        self.fn, self.kwargs, self.calls, self.batch = fn, kwargs, calls, batch
        self.latencies = []
        self.tokens_fn = tokens_fn
        started = time.perf_counter()
        self.result = fn(**kwargs)
        self.first_call_s = time.perf_counter() - started

    def __call__(self):
        for _ in range(self.calls):
            started = time.perf_counter()
            self.result = self.fn(**self.kwargs)
            self.latencies.append(time.perf_counter() - started)

    def stats(self):
        lat_ms = [s * 1000 for s in self.latencies]
        med = C.median(self.latencies)
        return {"batch": self.batch, "calls": len(self.latencies), "first_call_ms": self.first_call_s * 1000,
                "p50_ms": C.percentile(lat_ms, 50), "p90_ms": C.percentile(lat_ms, 90),
                "p99_ms": C.percentile(lat_ms, 99), "mean_ms": sum(lat_ms) / len(lat_ms),
                "examples_per_s": self.batch / med if med else float("nan")}


def cnn_variants(model, args, tf, np):
    from sklearn.datasets import load_digits

    from data.images import make_example

    serve, image_fn = model.signatures["serving_default"], model.signatures["predict_image"]
    spec = image_fn.structured_input_signature[1]["images"]
    h, w, c = (int(d) for d in spec.shape[1:])
    digits = load_digits()
    pixels = np.rint(np.clip(digits.images, 0, 16) * 255.0 / 16.0).astype(np.uint8)
    if (h, w, c) != (8, 8, 1):
        pixels = np.random.default_rng(0).integers(0, 256, (len(pixels), h, w, c), dtype=np.uint8)
    pixels = pixels.reshape(len(pixels), h, w, c)
    examples = [make_example(pixels[i], str(digits.target[i]), int(digits.target[i]), "medium",
                             f"digits/{i:05d}").SerializeToString() for i in range(args.batch)]
    b = args.batch
    return {
        "serving_default b=1": Signature(serve, {"examples": tf.constant(examples[:1])}, args.calls, 1),
        "predict_image b=1": Signature(image_fn, {"images": tf.constant(pixels[:1].astype(np.float32))}, args.calls, 1),
        f"serving_default b={b}": Signature(serve, {"examples": tf.constant(examples)}, args.batch_calls, b),
        f"predict_image b={b}": Signature(image_fn, {"images": tf.constant(pixels[:b].astype(np.float32))},
                                          args.batch_calls, b),
    }


def seq2seq_variants(model, args, tf, np):
    from data import text_features as tfeat
    from models.seq2seq.export import generate_request

    serve, generate = model.signatures["serving_default"], model.signatures["generate"]

    def steps_for(prompt):
        out = generate(**generate_request([prompt], generate.structured_input_signature[1], max_new_tokens=16))
        return decoder_steps(out, 16)

    prompt = max(PROMPTS, key=steps_for)
    words = prompt.split()

    def example(i):
        ctx = " ".join(words[i % 4:] + words[:i % 4])
        feature = {tfeat.CONTEXT: tf.train.Feature(bytes_list=tf.train.BytesList(value=[ctx.encode()]))}
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()

    examples = [example(i) for i in range(args.batch)]
    b = args.batch

    def gen(batch, n):
        return generate_request([prompt] * batch, generate.structured_input_signature[1], max_new_tokens=n)

    seq2seq_variants.prompt = prompt
    return {
        "serving_default b=1": Signature(serve, {"examples": tf.constant(examples[:1])}, args.calls, 1),
        f"serving_default b={b}": Signature(serve, {"examples": tf.constant(examples)}, args.batch_calls, b),
        "generate 1 token b=1": Signature(generate, gen(1, 1), max(5, args.calls // 4), 1),
        "generate 16 tokens b=1": Signature(generate, gen(1, 16), max(5, args.calls // 8), 1),
        f"generate 16 tokens b={b}": Signature(generate, gen(b, 16), max(2, args.batch_calls // 4), b),
    }


FIRST_REQUEST_MODES = ("no warm-up", "warm-up replayed")


def first_request_child(model_dir: str, mode: str) -> None:
    """In a fresh process: load, maybe replay the warm-up requests, time the first requests."""
    import stackenv  # noqa: F401

    import tensorflow as tf

    from data import text_features as tfeat
    from data.images import make_example
    from models.common import warmup

    model = tf.saved_model.load(model_dir)
    replayed = 0
    if mode == FIRST_REQUEST_MODES[1]:  # as TF Serving does at load
        for signature_name, inputs in warmup.read_warmup_requests(model_dir):
            model.signatures[signature_name](**{k: tf.constant(v) for k, v in inputs.items()})
            replayed += 1
    if "predict_image" in model.signatures:
        import numpy as np

        h, w, c = (int(d) for d in model.signatures["predict_image"].structured_input_signature[1]["images"].shape[1:])
        pixels = np.random.default_rng(0).integers(0, 256, (h, w, c), dtype=np.uint8)
        requests = {"serving_default": {"examples": tf.constant(
            [make_example(pixels, "3", 3, "medium", "digits/first").SerializeToString()])}}
    else:
        from models.seq2seq.export import generate_request

        feature = {tfeat.CONTEXT: tf.train.Feature(bytes_list=tf.train.BytesList(value=[PROMPTS[0].encode()]))}
        example = tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
        requests = {"serving_default": {"examples": tf.constant([example])},
                    "generate": generate_request([PROMPTS[1]], max_new_tokens=8)}
    result = {"replayed": replayed}
    for name, inputs in requests.items():
        for call in ("first", "second"):
            started = time.perf_counter()
            model.signatures[name](**inputs)
            result[f"{name} {call} ms"] = (time.perf_counter() - started) * 1000
    print("FIRST_REQUEST_JSON " + json.dumps(result), flush=True)


def first_request_ab(model_dir: Path, rounds: int):
    """Fresh process per sample, modes interleaved; medians per request kind."""
    samples = {m: [] for m in FIRST_REQUEST_MODES}

    def child(mode):
        def run():
            out = C.run_timed([C.PYTHON, __file__, "--first-request-child", str(model_dir), mode], timeout=600)
            line = next((l for l in out["stdout"].splitlines() if l.startswith("FIRST_REQUEST_JSON ")), None)
            if out["returncode"] != 0 or line is None:
                raise RuntimeError(f"first-request child failed: {out['stderr'][-2000:]}")
            samples[mode].append(json.loads(line.split(" ", 1)[1]))
            return out["wall_s"]
        return run

    C.interleave({m: child(m) for m in FIRST_REQUEST_MODES}, rounds=rounds, warmup=0)
    keys = [k for k in samples[FIRST_REQUEST_MODES[0]][0] if k.endswith(" ms")]
    return {m: {k: C.median([r[k] for r in runs]) for k in keys} | {"replayed": runs[0]["replayed"], "runs": runs}
            for m, runs in samples.items()}


def decoder_steps(result, max_new: int) -> int:
    """Decoder steps a generate call ran: emitted tokens, +1 for the end token if it stopped early."""
    text = result["continuations"].numpy()[0].decode()
    n = len(text.split())
    return max_new if n >= max_new else n + 1


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.first_request_child:
        first_request_child(*args.first_request_child)
        return 0
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)
    import stackenv  # noqa: F401

    import numpy as np
    import tensorflow as tf

    work = Path(args.work_dir)
    models = [m for m in args.models.split(",") if m]
    given = {"cnn": args.cnn_model_dir, "seq2seq": args.seq2seq_model_dir}
    results, rows = {}, []
    for name in models:
        model_dir = resolve_model_dir(given[name], name) if given[name] else train_quick_model(name, work, args.quick)
        started = time.perf_counter()
        model = tf.saved_model.load(str(model_dir))
        load_s = time.perf_counter() - started
        C.log(f"{name}: loaded {model_dir} in {load_s:.1f} s")
        variants = (cnn_variants if name == "cnn" else seq2seq_variants)(model, args, tf, np)
        C.interleave(variants, rounds=args.rounds, warmup=1)
        stats = {v: s.stats() for v, s in variants.items()}
        entry = {"model_dir": str(model_dir), "load_s": load_s, "signatures": stats}
        if name == "seq2seq":
            s1, s16 = variants["generate 1 token b=1"], variants["generate 16 tokens b=1"]
            steps1, steps16 = decoder_steps(s1.result, 1), decoder_steps(s16.result, 16)
            entry["prompt"] = seq2seq_variants.prompt
            entry["generate_steps"] = {"max_new_tokens=1": steps1, "max_new_tokens=16": steps16,
                                       "continuation_16": s16.result["continuations"].numpy()[0].decode()}
            if steps16 > steps1:
                entry["per_token_ms"] = (stats["generate 16 tokens b=1"]["p50_ms"] -
                                         stats["generate 1 token b=1"]["p50_ms"]) / (steps16 - steps1)
                entry["fixed_ms"] = stats["generate 1 token b=1"]["p50_ms"] - entry["per_token_ms"]
        from models.common import warmup

        if args.first_request_rounds and (model_dir / warmup.WARMUP_FILE).exists():
            C.log(f"{name}: first request after load, {args.first_request_rounds} rounds x "
                  f"{len(FIRST_REQUEST_MODES)} fresh processes")
            entry["first_request"] = first_request_ab(model_dir, args.first_request_rounds)
        elif args.first_request_rounds:
            C.log(f"{name}: {model_dir} has no TF Serving warm-up file (pushed before it existed); "
                  "first-request A/B skipped")
        results[name] = entry
        for v, s in stats.items():
            rows.append([name, v, s["p50_ms"], s["p99_ms"], s["examples_per_s"], s["first_call_ms"]])

        del model

    C.print_table(["model", "signature", "p50 ms", "p99 ms", "examples/s", "first call ms"], rows,
                  title=f"\nIn-process serving, {args.rounds} interleaved rounds (p50/p99 over all calls)")
    first_rows = []
    for name, entry in results.items():
        for mode, r in entry.get("first_request", {}).items():
            for key in (k for k in r if k.endswith(" ms")):
                first_rows.append([name, key.rsplit(" ", 2)[0], key.split()[-2], mode, r[key]])
    if first_rows:
        C.print_table(["model", "signature", "request", "after load", "ms (median)"], first_rows,
                      title=f"\nFirst requests after loading, fresh process each, {args.first_request_rounds} "
                      "interleaved round(s): TF Serving replays the warm-up requests at load")
    if "seq2seq" in results and "per_token_ms" in results["seq2seq"]:
        r = results["seq2seq"]
        print(f"seq2seq generate: {r['per_token_ms']:.2f} ms per generated token (batch 1, greedy), "
              f"{r['fixed_ms']:.2f} ms fixed (tokenize + encode); decoder steps {r['generate_steps']}")
    C.write_json(NAME, {"models": results, "rounds": args.rounds}, args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

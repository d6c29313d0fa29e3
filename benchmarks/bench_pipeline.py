"""Whole pipeline: cold run vs cached re-run, per-component times from MLMD, import overhead.

For each model (``--models``, default cnn and seq2seq), in a fresh output dir:

    cold:    python -m pipeline run --model M --output DIR      (whole-process wall time)
    cached:  the very same command again                        (should be all cached)
    third:   and once more (the first run pins the schema, which changes the second run's
             graph: ImportSchemaGen replaces SchemaGen; the third run shows the steady state)

Per-component times and states come from ML Metadata (``pipeline.results.mlmd.latest_run``); the
gate metric (CNN accuracy, seq2seq top-5) from the printed run summary. Reported: the
cached/cold ratio (target <= 0.25), the CNN cold wall time (target <= 60 s on 2 cores) and
its accuracy, and how much of each run is outside the components (interpreter start,
imports, data preparation, summary).

Import overhead is measured in the same run, interleaved: ``python -c pass``,
``python -m pipeline --help``, ``import tfx`` and the heavy imports behind a run.

The run dirs are kept (``--work-dir``) and listed in the JSON, so bench_serving and
bench_quality can reuse them (run_all.py does).

    .venv/bin/python benchmarks/bench_pipeline.py            # ~11 min (seq2seq trains ~6 min)
    .venv/bin/python benchmarks/bench_pipeline.py --models cnn   # ~2 min
    .venv/bin/python benchmarks/bench_pipeline.py --quick    # ~1 min: CNN, 20 train steps
"""
from __future__ import annotations

import re
import shlex
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_pipeline"

_RUN_MODULES = ("import stackenv, tfx.components, tfx.orchestration.pipeline, tfx.proto.trainer_pb2, "
                "tfx.orchestration.beam.beam_dag_runner, tfx.orchestration.metadata, components.evaluator, "
                "components.pusher, components.validator, tensorflow_model_analysis")
IMPORTS = {
    # name: python -c code (each in a fresh interpreter)
    "python -c pass": "pass",
    "python -m pipeline --help": None,  # special-cased: the real CLI
    "import tfx": "import tfx",
    "import stackenv, tensorflow": "import stackenv, tensorflow",
    "from tfx import v1": "import stackenv; from tfx import v1",
    "import tensorflow_model_analysis": "import stackenv, tensorflow_model_analysis",
    "import pipeline.local.runner (a run's imports)": "import stackenv, pipeline.local.runner, pipeline.results.summary",
    # What ``from tfx import v1`` adds on top of the TFX/TFMA modules a run needs anyway
    # (tfx.v1.extensions imports google.cloud.aiplatform): what graph.py saves by importing
    # the components directly (tfx.components, tfx.orchestration.pipeline, tfx.proto).
    "TFX/TFMA modules a run needs, no tfx.v1": _RUN_MODULES,
    "the same + from tfx import v1": _RUN_MODULES + "; from tfx import v1",
}
QUICK_IMPORTS = ("python -c pass", "python -m pipeline --help", "import tfx")


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--models", default="cnn,seq2seq")
    p.add_argument("--cnn-args", default="", help="extra `pipeline run` args for cnn (quoted string)")
    p.add_argument("--seq2seq-args", default="", help="extra `pipeline run` args for seq2seq, e.g. "
                   "'--epochs 1' to halve the run")
    p.add_argument("--repeats", type=int, default=1, help="cold+cached pairs per model (interleaved)")
    p.add_argument("--import-rounds", type=int, default=3)
    p.add_argument("--work-dir", default="/tmp/tfx-bench/pipeline",
                   help="run dirs go here (this invocation's own are wiped first; kept afterwards for reuse)")
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--fix-ab", action="store_true",
                   help="also measure what each speed fix gains end to end (benchmarks/_patched_cli.py): CNN "
                   "cold + cached runs, default vs each fix reverted vs all reverted, interleaved --fix-rounds "
                   "times (~6 min a round)")
    p.add_argument("--fix-rounds", type=int, default=1)
    args = p.parse_args(argv)
    if args.quick:
        args.models = "cnn" if args.models == "cnn,seq2seq" else args.models
        args.cnn_args = args.cnn_args or "--train-steps 20 --min-accuracy 0"
        args.seq2seq_args = args.seq2seq_args or "--train-steps 10 --min-accuracy 0"
        args.import_rounds = 1
        args.work_dir = args.work_dir + "-quick" if args.work_dir == "/tmp/tfx-bench/pipeline" else args.work_dir
    return args


# ------------------------------------------------------------------------ imports


def import_overhead(rounds: int, names):
    """Wall time of each command in a fresh interpreter, and how much of it is the exit.

    ``-c`` commands end by printing ``time.time()``; the process wall clock after that is
    interpreter shutdown (atexit handlers, thread joins, module teardown of TF/Beam/gRPC).
    """
    import time

    def cmd(name):
        if IMPORTS[name] is None:
            return [C.PYTHON, "-m", "pipeline", "--help"]
        return [C.PYTHON, "-c", IMPORTS[name] + "; import time; print('T_END', time.time())"]

    exits = {n: [] for n in names}

    def runner(name):
        def run():
            started = time.time()
            out = C.run_timed(cmd(name), timeout=600)
            ended = time.time()
            if out["returncode"] != 0:
                raise RuntimeError(f"{name} failed: {out['stderr'][-1000:]}")
            mark = [l for l in out["stdout"].splitlines() if l.startswith("T_END ")]
            if mark:
                exits[name].append(max(0.0, ended - float(mark[-1].split()[1])))
            return ended - started
        return run

    samples = C.interleave({n: runner(n) for n in names}, rounds=rounds, warmup=0)
    return {n: {"command": C.shell_command(cmd(n)), "seconds": C.summarize(s), "samples_s": s,
                "exit_s": C.summarize(exits[n]) if exits[n] else None}
            for n, s in samples.items()}


# ----------------------------------------------------------------------- pipeline

METRIC_RE = re.compile(r"^(?P<label>[A-Za-z0-9 -]+) \(overall\): (?P<value>[0-9.]+)", re.M)
WALL_RE = re.compile(r"^Wall time: (?P<s>[0-9.]+) s", re.M)
EXAMPLES_RE = re.compile(r"^Examples: (?P<n>\d+) in", re.M)


def read_mlmd(output_dir: Path, pipeline_name: str):
    from pipeline.results import mlmd

    store = mlmd.open_store(mlmd.sqlite_config(str(output_dir / "metadata.sqlite")))
    run = mlmd.latest_run(store, pipeline_name)
    comps = sorted(run.values(), key=lambda c: c.execution.id)
    return [{"node": c.node_id, "state": c.state, "seconds": c.seconds} for c in comps]


LOG_LINE_RE = re.compile(r"^(\d\d):(\d\d):(\d\d) (.*)$")


def phases(stderr: str, launched: float, ended: float):
    """Where the wall time went, from the CLI's own log lines (1 s resolution).

    startup: process start -> first log line (interpreter, CLI imports);
    before_components: first log -> 'Beam pipeline args' (schema pin, data preparation, their imports);
    components: -> the last component's done/cached line (graph build, all components, MLMD);
    after_components: -> process exit (summary: MLMD + TFMA result loading, schema pinning).
    """
    import datetime as dt

    day = dt.datetime.fromtimestamp(launched)
    stamps = []
    for line in stderr.splitlines():
        m = LOG_LINE_RE.match(line)
        if m:
            t = day.replace(hour=int(m.group(1)), minute=int(m.group(2)), second=int(m.group(3)),
                            microsecond=0).timestamp()
            if t < launched - 1:  # past midnight
                t += 86400
            stamps.append((t, m.group(4)))
    if not stamps:
        return {}
    first = stamps[0][0]
    beam = next((t for t, msg in stamps if msg.startswith("Beam pipeline args")), None)
    done = [t for t, msg in stamps if msg.startswith("\u2713 ")]
    out = {"startup_s": max(0.0, first - launched)}
    if beam is not None:
        out["before_components_s"] = beam - first
        if done:
            out["components_s"] = done[-1] - beam
            out["after_components_s"] = max(0.0, ended - done[-1])
    return out


def run_pipeline(model: str, output_dir: Path, extra: str, log_path: Path, timeout: float, reverts: str = ""):
    import os
    import time

    entry = [C.PYTHON, "-m", "pipeline"] if not reverts else [C.PYTHON, str(C.BENCH_DIR / "_patched_cli.py")]
    cmd = [*entry, "run", "--model", model, "--output", str(output_dir), *shlex.split(extra)]
    env = {**os.environ, "BENCH_REVERT": reverts} if reverts else None
    launched = time.time()
    out = C.run_timed(cmd, timeout=timeout, log_path=log_path, env=env)
    result = {"command": (f"BENCH_REVERT={reverts} " if reverts else "") + C.shell_command(cmd),
              "wall_s": out["wall_s"], "returncode": out["returncode"],
              "log": str(log_path), "phases_from_log": phases(out["stderr"], launched, time.time())}
    text = out["stdout"]
    m = METRIC_RE.search(text)
    if m:
        result["metric_label"], result["metric"] = m.group("label").strip(), float(m.group("value"))
    m = WALL_RE.search(text)
    result["cli_reported_wall_s"] = float(m.group("s")) if m else None
    m = EXAMPLES_RE.search(text)
    result["num_examples"] = int(m.group("n")) if m else None
    if out["returncode"] != 0:
        result["error"] = (out["stderr"].strip().splitlines() or ["?"])[-3:]
    try:
        result["components"] = read_mlmd(output_dir, f"{model}-pipeline")
    except Exception as error:  # noqa: BLE001
        result["components"] = []
        result["mlmd_error"] = f"{type(error).__name__}: {error}"
    result["components_s"] = sum(c["seconds"] for c in result["components"])
    result["outside_components_s"] = result["wall_s"] - result["components_s"]
    result["cached_components"] = sum(1 for c in result["components"] if c["state"] == "CACHED")
    return result


# The project's default carries every fix; each variant reverts some (benchmarks/_patched_cli.py).
REVERTIBLE_FIXES = ("tf_keras_autograph", "tfx_v1_import", "transform_statistics", "interpreter_exit")
FIX_VARIANTS = {
    "default (all fixes)": "",
    "- AutoGraph skips tf_keras": "tf_keras_autograph",
    "- direct TFX imports (tfx.v1)": "tfx_v1_import",
    "- Transform statistics off": "transform_statistics",
    "- fast process exit": "interpreter_exit",
    "none of the fixes (as before)": ",".join(REVERTIBLE_FIXES),
}


def fix_ab_runs(args, work: Path):
    """CNN cold (fresh dir) + cached re-run per variant, variants interleaved per round."""
    runs = {v: [] for v in FIX_VARIANTS}
    extra = args.cnn_args

    def variant(name, reverts):
        def run():
            r = len(runs[name])
            out = work / f"fix-{list(FIX_VARIANTS).index(name)}-r{r}"
            cold = run_pipeline("cnn", out, extra, work / f"{out.name}-cold.log", args.timeout, reverts)
            cached = run_pipeline("cnn", out, extra, work / f"{out.name}-cached.log", args.timeout, reverts)
            C.log(f"  fix A/B {name!r}: cold {cold['wall_s']:.1f} s (exit {cold['returncode']}, "
                  f"{cold.get('metric_label')} {cold.get('metric')}), cached {cached['wall_s']:.1f} s")
            runs[name].append({"cold": cold, "cached": cached})
            return cold["wall_s"]
        return run

    C.log(f"fix A/B: {len(FIX_VARIANTS)} variants x {args.fix_rounds} rounds (CNN cold + cached each)")
    C.interleave({n: variant(n, f) for n, f in FIX_VARIANTS.items()}, rounds=args.fix_rounds, warmup=0)
    default = next(iter(FIX_VARIANTS))
    base_cold = [r["cold"]["wall_s"] for r in runs[default]]
    result = {}
    rows = []
    for name, reverts in FIX_VARIANTS.items():
        colds = [r["cold"]["wall_s"] for r in runs[name]]
        cacheds = [r["cached"]["wall_s"] for r in runs[name]]
        comps = {c["node"]: c["seconds"] for c in runs[name][0]["cold"]["components"]}
        ok = all(r["cold"]["returncode"] == 0 and r["cached"]["returncode"] == 0 for r in runs[name])
        result[name] = {"reverted": reverts, "ok": ok, "runs": runs[name], "cold_s": C.median(colds),
                        "cached_s": C.median(cacheds), "cold_vs_default": C.paired_ratio(colds, base_cold),
                        "metric": runs[name][0]["cold"].get("metric")}
        rows.append([name, C.median(colds), result[name]["cold_vs_default"], C.median(cacheds),
                     comps.get("Trainer"), comps.get("Transform"),
                     runs[name][0]["cold"]["phases_from_log"].get("before_components_s"),
                     result[name]["metric"], "ok" if ok else "FAILED"])
    C.print_table(["variant", "cold s", "x default", "cached s", "Trainer s", "Transform s",
                   "schema+data prep s", "accuracy", "runs"], rows,
                  title=f"\nSpeed fixes end to end, each reverted (benchmarks/_patched_cli.py), CNN, "
                  f"{args.fix_rounds} interleaved round(s); x default > 1 = slower without the fix")
    return result


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header(NAME, machine, args.quick)
    work = Path(args.work_dir)
    models = [m for m in args.models.split(",") if m]
    # Wipe only what this invocation rewrites: a --fix-ab-only run keeps the model runs
    # that bench_serving / bench_quality may be reading.
    for stale in [*(p for m in models for p in work.glob(f"{m}-r*")), *work.glob("fix-*")]:
        if stale.name.startswith("fix-") and not args.fix_ab:
            continue
        shutil.rmtree(stale, ignore_errors=True) if stale.is_dir() else stale.unlink(missing_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    extra = {"cnn": args.cnn_args, "seq2seq": args.seq2seq_args}

    runs = {m: [] for m in models}
    for r in range(args.repeats):
        for model in C.rotated(models, r):
            out_dir = work / f"{model}-r{r}"
            C.log(f"{model} round {r}: cold run -> {out_dir}")
            cold = run_pipeline(model, out_dir, extra[model], work / f"{model}-r{r}-cold.log", args.timeout)
            C.log(f"  cold: {cold['wall_s']:.1f} s, exit {cold['returncode']}; cached re-run")
            cached = run_pipeline(model, out_dir, extra[model], work / f"{model}-r{r}-cached.log", args.timeout)
            C.log(f"  cached: {cached['wall_s']:.1f} s, exit {cached['returncode']}, "
                  f"{cached['cached_components']}/{len(cached['components'])} components cached; third run")
            third = run_pipeline(model, out_dir, extra[model], work / f"{model}-r{r}-third.log", args.timeout)
            C.log(f"  third: {third['wall_s']:.1f} s, exit {third['returncode']}, "
                  f"{third['cached_components']}/{len(third['components'])} components cached")
            runs[model].append({"output_dir": str(out_dir), "cold": cold, "cached": cached, "third": third,
                                "cached_over_cold": C.ratio(cached["wall_s"], cold["wall_s"]),
                                "third_over_cold": C.ratio(third["wall_s"], cold["wall_s"])})

    fix_ab = fix_ab_runs(args, work) if args.fix_ab else None

    names = list(IMPORTS) if not args.quick else list(QUICK_IMPORTS)
    imports = {}
    if args.import_rounds > 0:
        C.log(f"import overhead: {len(names)} commands x {args.import_rounds} interleaved rounds")
        imports = import_overhead(args.import_rounds, names)

    # ---------------------------------------------------------------- report
    results = {}
    rows = []
    for model, pairs in runs.items():
        colds = [p["cold"]["wall_s"] for p in pairs]
        cacheds = [p["cached"]["wall_s"] for p in pairs]
        thirds = [p["third"]["wall_s"] for p in pairs]
        ok = all(p[k]["returncode"] == 0 for p in pairs for k in ("cold", "cached", "third"))
        ratio = C.paired_ratio(cacheds, colds)
        ratio3 = C.paired_ratio(thirds, colds)
        metric = C.median([p["cold"].get("metric") for p in pairs if p["cold"].get("metric") is not None])
        results[model] = {
            "ok": ok, "runs": pairs,
            "cold_wall_s": C.summarize(colds), "cached_wall_s": C.summarize(cacheds),
            "third_wall_s": C.summarize(thirds),
            "cached_over_cold": ratio, "cached_over_cold_target": 0.25,
            "cached_over_cold_target_met": bool(ok and ratio <= 0.25),
            "third_over_cold": ratio3, "third_over_cold_target_met": bool(ok and ratio3 <= 0.25),
            "cached_components_second_run": f"{pairs[0]['cached']['cached_components']}/{len(pairs[0]['cached']['components'])}",
            "cached_components_third_run": f"{pairs[0]['third']['cached_components']}/{len(pairs[0]['third']['components'])}",
            "metric_label": pairs[0]["cold"].get("metric_label"), "metric": metric,
        }
        rows.append([model, "cold", C.median(colds), pairs[0]["cold"]["components_s"],
                     pairs[0]["cold"]["outside_components_s"], 1.0, "0", pairs[0]["cold"]["returncode"]])
        rows.append([model, "cached (2nd)", C.median(cacheds), pairs[0]["cached"]["components_s"],
                     pairs[0]["cached"]["outside_components_s"], ratio,
                     results[model]["cached_components_second_run"], pairs[0]["cached"]["returncode"]])
        rows.append([model, "3rd run", C.median(thirds), pairs[0]["third"]["components_s"],
                     pairs[0]["third"]["outside_components_s"], ratio3,
                     results[model]["cached_components_third_run"], pairs[0]["third"]["returncode"]])
    C.print_table(["model", "run", "wall s", "in components s", "outside components s", "x cold",
                   "cached comps", "exit"], rows,
                  title="\nWhole-process wall time (python -m pipeline run ...), medians")

    comp_rows = []
    for model, pairs in runs.items():
        cold = {c["node"]: c for c in pairs[0]["cold"]["components"]}
        cached = {c["node"]: c for c in pairs[0]["cached"]["components"]}
        third = {c["node"]: c for c in pairs[0]["third"]["components"]}
        nodes = list(dict.fromkeys([*third, *cached, *cold]))
        for node in nodes:
            comp_rows.append([model, node, cold.get(node, {}).get("seconds"), cold.get(node, {}).get("state", "-"),
                              cached.get(node, {}).get("seconds"), cached.get(node, {}).get("state"),
                              third.get(node, {}).get("seconds"), third.get(node, {}).get("state")])
    if comp_rows:
        C.print_table(["model", "component", "cold s", "cold state", "2nd s", "2nd state", "3rd s", "3rd state"],
                      comp_rows,
                      title="\nPer component (MLMD execution times, round 0)")

    phase_rows = []
    for model, pairs in runs.items():
        for kind in ("cold", "cached", "third"):
            ph = pairs[0][kind]["phases_from_log"]
            phase_rows.append([model, kind, ph.get("startup_s"), ph.get("before_components_s"),
                               ph.get("components_s"), ph.get("after_components_s"), pairs[0][kind]["wall_s"]])
    C.print_table(["model", "run", "start-up s", "schema+data prep s", "components s", "summary+exit s", "wall s"],
                  phase_rows, title="\nPhases from the CLI's log timestamps (1 s resolution, round 0)")

    if imports:
        C.print_table(["command", "median s", "min s", "max s", "of which exit s"],
                      [[n, v["seconds"]["median"], v["seconds"]["min"], v["seconds"]["max"],
                        (v["exit_s"] or {}).get("median")] for n, v in imports.items()],
                      title=f"\nStart-up / import overhead, fresh interpreter each, {args.import_rounds} interleaved rounds")

    summary = {}
    if "cnn" in results:
        cnn = results["cnn"]
        summary.update({
            "cnn_cold_wall_s": cnn["cold_wall_s"].get("median"),
            "cnn_cold_target_s": 60, "cnn_cold_target_met": bool(cnn["ok"] and cnn["cold_wall_s"].get("median", 1e9) <= 60),
            "cnn_accuracy": cnn["metric"], "cnn_cached_over_cold": cnn["cached_over_cold"],
            "cnn_third_over_cold": cnn["third_over_cold"],
        })
    if "seq2seq" in results:
        summary.update({"seq2seq_cold_wall_s": results["seq2seq"]["cold_wall_s"].get("median"),
                        "seq2seq_cached_over_cold": results["seq2seq"]["cached_over_cold"],
                        "seq2seq_third_over_cold": results["seq2seq"]["third_over_cold"],
                        "seq2seq_top5": results["seq2seq"]["metric"]})
    if fix_ab:
        summary["fix_ab"] = {v: {"cold_s": r["cold_s"], "cached_s": r["cached_s"], "cold_vs_default": r["cold_vs_default"]}
                             for v, r in fix_ab.items()}
    summary["help_s"] = imports.get("python -m pipeline --help", {}).get("seconds", {}).get("median")
    summary["import_tfx_s"] = imports.get("import tfx", {}).get("seconds", {}).get("median")
    print()
    for model, r in results.items():
        print(f"{model}: cold {r['cold_wall_s'].get('median', float('nan')):.1f} s, cached "
              f"{r['cached_wall_s'].get('median', float('nan')):.1f} s, cached/cold {r['cached_over_cold']:.2f} "
              f"(target <= 0.25: {'met' if r['cached_over_cold_target_met'] else 'MISSED'}; "
              f"{r['cached_components_second_run']} components cached), 3rd run "
              f"{r['third_wall_s'].get('median', float('nan')):.1f} s = {r['third_over_cold']:.2f} of cold "
              f"({r['cached_components_third_run']} cached)"
              + (f", {r['metric_label']} {r['metric']:.4f}" if r["metric"] == r["metric"] else "")
              + ("" if r["ok"] else "  [A RUN FAILED: see the logs in the JSON]"))
    if "cnn_cold_wall_s" in summary:
        print(f"CNN cold wall {summary['cnn_cold_wall_s']:.1f} s (target <= 60 s: "
              f"{'met' if summary['cnn_cold_target_met'] else 'MISSED'})")
    C.write_json(NAME, {"models": results, "imports": imports, "fix_ab": fix_ab, "summary": summary},
                 args, machine, contention)
    return 0 if all(r["ok"] for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

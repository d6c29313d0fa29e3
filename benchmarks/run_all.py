"""Run every benchmark, one after the other, each in its own process; ``make bench`` calls this.

Order: pipeline (its cold runs are kept and reused below), input, train step, Beam,
serving and quality (both on the pipeline's pushed models / run dirs, so the default
pipelines train only once). ``--quick`` passes through; ``--only`` picks benchmarks.
Each writes benchmarks/results/<name>.json; this writes results/run_all.json with their
exit codes, times and headline numbers. A failing benchmark does not stop the others; the
exit code is non-zero if any failed.

    .venv/bin/python benchmarks/run_all.py            # ~25 min on 2 cores
    .venv/bin/python benchmarks/run_all.py --quick    # ~4 min (each one's smoke mode)
    .venv/bin/python benchmarks/run_all.py --only input,train_step
    .venv/bin/python benchmarks/run_all.py --quick --only tfx_example   # against TFX's example, ~4 min
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as C  # noqa: E402

ORDER = ("pipeline", "input", "train_step", "beam", "serving", "quality")
#: Run only when ``--only`` names them: each is long even in its smoke mode.
OPTIONAL = ("tfx_example",)


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--only", default=",".join(ORDER),
                   help=f"comma list of {', '.join(ORDER)}; also {', '.join(OPTIONAL)} (not run by default)")
    return p.parse_args(argv)


def headline(name: str, doc: dict) -> str:
    try:
        if name == "pipeline":
            s = doc["summary"]
            acc = s.get("cnn_accuracy")
            parts = [f"CNN cold {s.get('cnn_cold_wall_s', float('nan')):.1f} s, cached/cold "
                     f"{s.get('cnn_cached_over_cold', float('nan')):.2f} (3rd run "
                     f"{s.get('cnn_third_over_cold', float('nan')):.2f}), acc "
                     + ("n/a" if acc is None else f"{acc:.4f}")]
            if "seq2seq_cold_wall_s" in s:
                parts.append(f"seq2seq cold {s['seq2seq_cold_wall_s']:.1f} s, cached/cold "
                             f"{s['seq2seq_cached_over_cold']:.2f}")
            parts.append(f"--help {s.get('help_s', float('nan')):.2f} s, import tfx {s.get('import_tfx_s', float('nan')):.2f} s")
            return "; ".join(parts)
        if name == "input":
            s = doc["summary"]
            return (f"trainer/naive {s['trainer_vs_naive_transform_layout']:.2f}x (Transform's 1 file), "
                    f"{s['trainer_vs_naive_sharded']:.2f}x (sharded), {s['trainer_vs_naive_slow_storage']:.2f}x (slow storage)")
        if name == "train_step":
            return "; ".join(f"{k}: " + ", ".join(f"{m} {v['steps_per_s']:.1f}/s" for m, v in r["modes"].items())
                             + f" -> {r['winner_steady_state']}" for k, r in doc["models"].items())
        if name == "beam":
            return "; ".join(f"{m}: stats+transform {r['stats_plus_transform_examples_per_s']:.0f} ex/s, counts "
                             f"{'ok' if r['counts_ok'] else 'MISMATCH'}" for m, r in doc["modes"].items()) \
                + f" ({doc['num_examples']} examples)"
        if name == "serving":
            parts = []
            for m, r in doc["models"].items():
                s = r["signatures"]
                first = next(iter(s))
                parts.append(f"{m} {first} p50 {s[first]['p50_ms']:.2f} ms")
                if "per_token_ms" in r:
                    parts.append(f"generate {r['per_token_ms']:.2f} ms/token")
            return "; ".join(parts)
        if name == "quality":
            parts = []
            if "cnn" in doc["models"]:
                r = doc["models"]["cnn"]
                acc = "n/a" if r["accuracy"] is None else f"{r['accuracy']:.4f}"
                parts.append(f"CNN acc {acc}, SVC {next(iter(r['references'].values()))['accuracy']:.4f}")
            if "seq2seq" in doc["models"]:
                r = doc["models"]["seq2seq"]
                parts.append(f"seq2seq top-5 {r['top5'] or float('nan'):.4f} vs bigram "
                             f"{r['baselines'].get('bigram_top5') or float('nan'):.4f}")
            return "; ".join(parts)
        if name == "tfx_example":
            return "; ".join(f"{size} images: project/example " + ", ".join(f"{mode} {r['wall']:.2f}x"
                                                                          for mode, r in modes.items())
                             for size, modes in doc["ratios"].items())
    except (KeyError, TypeError, ValueError, StopIteration) as error:
        return f"(no headline: {type(error).__name__} {error})"
    return ""


def main(argv=None) -> int:
    args = parse_args(argv)
    machine = C.machine_info()
    contention = C.Contention()
    C.print_header("run_all", machine, args.quick)
    chosen = [n for n in ORDER + OPTIONAL if n in args.only.split(",")]
    quick = ["--quick"] if args.quick else []
    results_dir = Path(args.json_out).parent if args.json_out else C.RESULTS_DIR
    summary = {}
    pipeline_doc = None
    for name in chosen:
        script = C.BENCH_DIR / f"bench_{name}.py"
        json_path = results_dir / f"bench_{name}.json"
        cmd = [C.PYTHON, str(script), *quick, "--json-out", str(json_path)]
        if name in ("serving", "quality") and pipeline_doc:
            runs = {m: r["runs"][0]["output_dir"] for m, r in pipeline_doc.get("models", {}).items()
                    if r.get("ok")}
            if name == "serving":
                for m, d in runs.items():
                    cmd += [f"--{m}-model-dir", d]
                if runs:
                    cmd += ["--models", ",".join(runs)]
            else:
                for m, d in runs.items():
                    cmd += [f"--{m}-output", d]
                if runs:
                    cmd += ["--models", ",".join(runs)]
        print(f"\n##### {C.shell_command(cmd)}", flush=True)
        started = time.perf_counter()
        code = subprocess.call(cmd, cwd=str(C.PROJECT_ROOT))
        wall = time.perf_counter() - started
        doc = json.loads(json_path.read_text()) if json_path.exists() and json_path.stat().st_mtime > time.time() - wall - 5 else None
        if name == "pipeline":
            pipeline_doc = doc
        summary[name] = {"exit": code, "wall_s": wall, "json": str(json_path),
                         "headline": headline(name, doc) if doc else "(no JSON written)"}
    C.print_table(["benchmark", "exit", "wall s", "headline"],
                  [[n, s["exit"], s["wall_s"], s["headline"]] for n, s in summary.items()],
                  title="\nAll benchmarks")
    C.write_json("run_all", {"benchmarks": summary}, args, machine, contention)
    return 0 if all(s["exit"] == 0 for s in summary.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

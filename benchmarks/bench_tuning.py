"""Default vs tuned hyperparameters at equal training budget, through the real pipeline.

For each data set, two runs of ``python -m pipeline run`` in one output directory (the second
reuses the cached ExampleGen/Transform): the family's defaults, then ``--tune-trials N``
with the same ``--train-steps``. Each has its own serving name, so neither is gated against
the other. Reported: the family's key metric on the eval split, the Tuner's and the
Trainer's seconds (from the run summary), and the search's best vs untuned score on
held-out train examples.

    .venv/bin/python benchmarks/bench_tuning.py                    # digits + default text corpus
    .venv/bin/python benchmarks/bench_tuning.py --quick            # smoke: 2 trials, few steps
    .venv/bin/python benchmarks/bench_tuning.py --images ~/pets    # + an image folder
    .venv/bin/python benchmarks/bench_tuning.py --images ~/pets --sets images   # that folder only

Results: benchmarks/README.md ("Tuning").
"""
from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import base_parser, machine_info, print_header, print_table, run_timed, write_json  # noqa: E402

NAME = "bench_tuning"
METRIC = re.compile(r"^(Accuracy|Top-5 next-word accuracy) \(overall\): ([0-9.]+)", re.M)
COMPONENT = re.compile(r"^\s+(Tuner|Trainer)\s+\w+\s+([0-9.]+) s", re.M)
BEST = re.compile(r"best trial \S+: ([0-9.]+) vs ([0-9.]+) with the untuned defaults", re.M)


def _run(output: Path, model: str, data: str | None, mode: str, args, log_dir: Path) -> dict:
    command = [sys.executable, "-m", "pipeline", "run", "--model", model, "--output", str(output),
               "--serving-name", f"{model}-{mode}", "--train-steps", str(args.train_steps),
               "--gate-margin", "-1", "--min-accuracy", "0"]
    if data:
        command += ["--data", data]
    if mode == "tuned":
        command += ["--tune-trials", str(args.trials), "--tune-steps", str(args.tune_steps),
                    "--tune-algorithm", args.algorithm]
    result = run_timed(command, timeout=args.timeout, log_path=log_dir / f"{model}-{mode}.log")
    if result["returncode"] != 0:
        raise SystemExit(f"{model} {mode} failed; see {log_dir}/{model}-{mode}.log")
    stdout = result["stdout"]
    metric = METRIC.search(stdout)
    seconds = dict(COMPONENT.findall(stdout))
    best = BEST.search(stdout)
    return {"key_metric": float(metric.group(2)) if metric else None,
            "metric_label": metric.group(1) if metric else None,
            "trainer_s": float(seconds.get("Trainer", "nan")), "tuner_s": float(seconds.get("Tuner", "nan")),
            "search_best": float(best.group(1)) if best else None,
            "search_default": float(best.group(2)) if best else None, "wall_s": result["wall_s"]}


def main(argv=None) -> None:
    parser = base_parser(__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--tune-steps", type=int, default=200)
    parser.add_argument("--train-steps", type=int, default=1000, help="both runs train exactly this many steps")
    parser.add_argument("--algorithm", default="random")
    parser.add_argument("--images", default=None, help="an image folder to add (one sub-folder per class)")
    parser.add_argument("--sets", default="digits,text,images",
                        help="which of digits, text, images (the --images folder) to run")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--work-dir", default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.trials, args.tune_steps, args.train_steps = 2, 10, 20
    machine = machine_info()
    print_header(NAME, machine, args.quick)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="bench-tuning-"))
    chosen = set(args.sets.split(","))
    sets = [(name, model, data) for key, name, model, data in (
        ("digits", "digits", "cnn", None),
        ("images", Path(args.images).name if args.images else "", "cnn", args.images),
        ("text", "python-reference", "seq2seq", None)) if key in chosen and (key != "images" or args.images)]
    results = []
    for name, model, data in sets:
        output = work / name
        for mode in ("default", "tuned"):
            row = {"data": name, "model": model, "mode": mode,
                   **_run(output, model, data, mode, args, work / "logs")}
            results.append(row)
            print(f"{name} {mode}: {row}", flush=True)
    print_table(["data", "mode", "key metric", "tuning s", "training s", "search best / untuned"],
                [[r["data"], r["mode"], r["key_metric"], r["tuner_s"], r["trainer_s"],
                  f"{r['search_best']} / {r['search_default']}" if r["search_best"] is not None else "-"]
                 for r in results], title=f"{args.trials} trials x {args.tune_steps} steps, "
                                         f"{args.train_steps} training steps each")
    write_json(NAME, {"results": results}, args, machine)


if __name__ == "__main__":
    main()

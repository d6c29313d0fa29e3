"""What starting one Beam component costs before it reads a record: TFX as shipped vs the project.

TFX's ``BaseBeamExecutor.__init__`` packages TFX itself (a copy of the installed ``tfx``
tree and a ``setup.py sdist`` in a subprocess) whenever Beam args are set and none names a
dependency, for remote workers to install. The project skips it where Beam's workers share
this environment (``stackenv.compat.skip_tfx_sdist_for_local_beam``). Each variant builds
StatisticsGen's executor ``--builds`` times in a fresh process (the hook is process-wide),
interleaved over ``--rounds``; the time excludes imports.

    python benchmarks/bench_beam_executor_start.py --rounds 3
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_beam_executor_start"
VARIANTS = {"TFX as shipped (sdist per executor)": False, "project (no sdist for local Beam)": True}


def parse_args(argv=None):
    p = C.base_parser(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--builds", type=int, default=2, help="executors built per process")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def child(hooked: bool, builds: int) -> float:
    import stackenv  # noqa: F401
    from stackenv import compat

    from tfx.components.statistics_gen import executor

    if hooked:
        compat.skip_tfx_sdist_for_local_beam()
    started = time.perf_counter()
    for _ in range(builds):
        executor.Executor(executor.Executor.Context(beam_pipeline_args=["--direct_running_mode=in_memory"]))
    return (time.perf_counter() - started) / builds


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child == "hooked", args.builds)))
        return 0
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)
    contention = C.Contention()
    rounds = 1 if args.quick else args.rounds

    def variant(hooked: bool):
        def run() -> float:
            cmd = [C.PYTHON, __file__, "--child", "hooked" if hooked else "tfx", "--builds", str(args.builds)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
            return float(out.stdout.strip().splitlines()[-1])
        return run

    samples = C.interleave({name: variant(hooked) for name, hooked in VARIANTS.items()}, rounds, warmup=0)
    base = C.median(samples[next(iter(VARIANTS))])
    C.print_table(["variant", "seconds per executor (median)", "ratio to TFX as shipped"],
                  [(name, C.median(s), C.ratio(C.median(s), base)) for name, s in samples.items()],
                  title=f"Starting a Beam executor, {rounds} rounds x {args.builds} builds")
    C.write_json(NAME, {"samples_s": samples}, args, machine, contention)
    return 0


if __name__ == "__main__":
    sys.exit(main())

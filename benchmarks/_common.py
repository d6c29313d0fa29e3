"""Shared helpers of the benchmarks: interleaved timing, statistics, tables, JSON, machine info.

Every benchmark measures its variants SIDE BY SIDE in one process run: repetitions are
interleaved (round r runs every variant once, in an order rotated per round), so a burst of
load from another process hits all variants alike. Results are medians and ratios of
medians; the per-round (paired) ratio's median is reported too, since under shared-CPU noise
it is the more robust of the two. Never compare absolute numbers between two runs.

Deliberately light: no TensorFlow import here, so ``--help`` and the subprocess-based
benchmarks stay cheap.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
PYTHON = sys.executable

if str(PROJECT_ROOT) not in sys.path:
    sys.path.insert(0, str(PROJECT_ROOT))


# ---------------------------------------------------------------------------- arguments


def base_parser(description: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="smoke mode: tiny sizes, few repetitions (numbers are not meaningful)")
    parser.add_argument("--json-out", default=None,
                        help="where to write the JSON result (default: benchmarks/results/<name>.json)")
    return parser


# ------------------------------------------------------------------------------- timing


def now() -> float:
    return time.perf_counter()


def time_call(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def rotated(names: Sequence[str], round_index: int) -> list[str]:
    """The variant order of one round: rotated by the round number, so no variant is always first."""
    if not names:
        return []
    k = round_index % len(names)
    return list(names[k:]) + list(names[:k])


def interleave(variants: Mapping[str, Callable[[], Any]], rounds: int, warmup: int = 1,
               on_round: Callable[[int, dict[str, float]], None] | None = None,
               ) -> dict[str, list[float]]:
    """Run each variant ``warmup`` times (untimed), then ``rounds`` interleaved timed rounds.

    Returns ``{name: [seconds per round]}``. A callable may return a number to override its
    measured time (e.g. a time it measured itself, excluding set-up).
    """
    names = list(variants)
    for w in range(warmup):
        for name in rotated(names, w):
            variants[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        this_round = {}
        for name in rotated(names, r):
            started = time.perf_counter()
            result = variants[name]()
            elapsed = time.perf_counter() - started
            if isinstance(result, (int, float)) and not isinstance(result, bool):
                elapsed = float(result)
            samples[name].append(elapsed)
            this_round[name] = elapsed
        if on_round:
            on_round(r, this_round)
    return samples


# --------------------------------------------------------------------------- statistics


def summarize(values: Sequence[float]) -> dict[str, float]:
    vals = sorted(v for v in values if v is not None and not math.isnan(v))
    if not vals:
        return {"n": 0}
    return {
        "n": len(vals),
        "median": statistics.median(vals),
        "min": vals[0],
        "max": vals[-1],
        "mean": statistics.fmean(vals),
        "p25": percentile(vals, 25),
        "p75": percentile(vals, 75),
    }


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method), no numpy needed."""
    vals = sorted(values)
    if not vals:
        return float("nan")
    pos = (len(vals) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return vals[lo] + (vals[hi] - vals[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else float("nan")


def ratio(numerator: float, denominator: float) -> float:
    if not denominator or denominator != denominator:
        return float("nan")
    return numerator / denominator


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> float:
    """Median of per-round ratios (rounds were interleaved, so each pair shared its load)."""
    pairs = [n / d for n, d in zip(numerators, denominators) if d]
    return statistics.median(pairs) if pairs else float("nan")


def rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else float("nan")


# ------------------------------------------------------------------------------- output


def fmt(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value != value:
            return "n/a"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.1f}"
        if abs(value) >= 0.1:
            return f"{value:.{max(1, digits - 1)}f}" if abs(value) >= 1 else f"{value:.{digits}f}"
        return f"{value:.{digits}g}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> str:
    """A plain-text table, right-aligned numbers, ready to print or paste into Markdown."""
    cells = [[str(h) for h in headers]] + [[fmt(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = []
    if title:
        lines.append(title)
    lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |")
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in cells[1:]:
        lines.append("| " + " | ".join(c.rjust(w) if _numeric(c) else c.ljust(w)
                                       for c, w in zip(row, widths)) + " |")
    return "\n".join(lines)


def _numeric(text: str) -> bool:
    return text.replace(",", "").replace(".", "").replace("-", "").replace("x", "").isdigit()


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], title: str | None = None) -> str:
    text = table(headers, rows, title)
    print("\n" + text, flush=True)
    return text


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -------------------------------------------------------------------------- machine info


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def gpu_info() -> str:
    """'none' unless nvidia-smi lists a GPU (checked without importing TensorFlow)."""
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "none"


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def package_versions(names: Sequence[str] = ("tensorflow", "tf-keras", "tfx", "apache-beam",
                                             "tensorflow-transform", "tensorflow-data-validation",
                                             "tensorflow-model-analysis", "scikit-learn")) -> dict[str, str]:
    from importlib import metadata

    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def loadavg() -> list[float]:
    try:
        return [float(v) for v in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return []


def machine_info() -> dict[str, Any]:
    return {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in [PYTHON] + sys.argv),
        "cwd": os.getcwd(),
        "hostname": platform.node(),
        "cores": usable_cores(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "gpu": gpu_info(),
        "memory_gib": _memory_gib(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": package_versions(),
        "git_commit": _git("rev-parse", "--short", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain")),
        "loadavg_at_start": loadavg(),
    }


def _memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return float("nan")


class Contention:
    """How busy the machine was with OTHER work while a benchmark ran (a noise indicator).

    Machine-wide busy CPU time comes from /proc/stat, this process tree's own from
    getrusage (self + waited-for children); the difference, over wall time x cores, is the
    share of the machine that other processes used. Approximate (in a container /proc/stat
    can cover more CPUs than this process may use); reported, never used in results.
    """

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.busy0 = self._machine_busy()
        self.own0 = self._own()
        self.load0 = loadavg()

    @staticmethod
    def _machine_busy() -> float | None:
        try:
            fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        except (OSError, ValueError, IndexError):
            return None
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
        return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def _own() -> float:
        total = 0.0
        for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
            usage = resource.getrusage(who)
            total += usage.ru_utime + usage.ru_stime
        return total

    def result(self) -> dict[str, Any]:
        wall = time.monotonic() - self.started
        busy1 = self._machine_busy()
        own = self._own() - self.own0
        stat_cpus = _stat_cpus()
        out: dict[str, Any] = {"wall_s": round(wall, 1), "own_cpu_s": round(own, 1),
                               "loadavg_start": self.load0, "loadavg_end": loadavg()}
        if self.busy0 is not None and busy1 is not None and wall > 0:
            machine = busy1 - self.busy0
            other = max(0.0, machine - own)
            out.update({
                "machine_busy_cpu_s": round(machine, 1),
                "other_processes_cpu_s": round(other, 1),
                "other_processes_share_of_cores": round(other / (wall * max(1, stat_cpus)), 3),
                "proc_stat_cpus": stat_cpus,
            })
        return out


def _stat_cpus() -> int:
    try:
        return sum(1 for line in Path("/proc/stat").read_text().splitlines()
                   if line.startswith("cpu") and line[3:4].isdigit())
    except OSError:
        return usable_cores()


def latest_numbered(pattern: str, hint: str) -> str:
    """The match of ``pattern`` whose last path part is the largest number: a TFX artifact folder of a run's
    latest execution (``.../Transform/transform_graph/*``). Exits naming ``hint`` when none matches."""
    found = [path for path in glob.glob(pattern) if os.path.basename(path.rstrip("/")).isdigit()]
    if not found:
        raise SystemExit(f"no {pattern}: {hint}")
    return max(found, key=lambda path: int(os.path.basename(path.rstrip("/"))))


def result_path(name: str, json_out: str | None) -> Path:
    return Path(json_out) if json_out else RESULTS_DIR / f"{name}.json"


def write_json(name: str, payload: dict[str, Any], args: argparse.Namespace,
               machine: dict[str, Any], contention: Contention | None = None) -> Path:
    """Write ``{benchmark, quick, args, machine, contention, **payload}``; returns the path."""
    path = result_path(name, getattr(args, "json_out", None))
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "benchmark": name,
        "quick": bool(getattr(args, "quick", False)),
        "args": {k: v for k, v in vars(args).items()},
        "machine": machine,
        "contention": contention.result() if contention else None,
        **payload,
    }
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=False, default=_json_default) + "\n")
    os.replace(tmp, path)
    print(f"\nJSON: {path}", flush=True)
    return path


def _json_default(value: Any) -> Any:
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:
        pass
    if isinstance(value, Path):
        return str(value)
    return str(value)


def print_header(name: str, machine: dict[str, Any], quick: bool) -> None:
    print(f"== {name}{' (--quick: smoke numbers only)' if quick else ''} ==")
    print(f"{machine['date']}  {machine['cores']} cores ({machine['cpu_model']}), GPU: "
          f"{machine['gpu']}, load avg {machine['loadavg_at_start']}, git {machine['git_commit']}"
          f"{' (dirty)' if machine['git_dirty'] else ''}", flush=True)


# --------------------------------------------------------------------------- TF knobs


def skip_autograph_for_tf_keras() -> None:
    """What the Trainer does before ``fit`` (models/common/autograph.py); call after TF is imported."""
    from models.common.autograph import convert_tf_keras

    convert_tf_keras(False)


# ---------------------------------------------------------------------------- processes


def run_timed(cmd: Sequence[str], *, timeout: float = 1800, env: dict[str, str] | None = None,
              cwd: Path | None = None, log_path: Path | None = None) -> dict[str, Any]:
    """Run ``cmd`` to completion; returns wall seconds, exit code and the output tail."""
    started = time.perf_counter()
    proc = subprocess.run(list(cmd), cwd=str(cwd or PROJECT_ROOT), capture_output=True, text=True,
                          timeout=timeout, env=env)
    wall = time.perf_counter() - started
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"$ {' '.join(shlex.quote(c) for c in cmd)}\n# exit {proc.returncode}, "
                            f"{wall:.1f} s\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}")
    return {"wall_s": wall, "returncode": proc.returncode, "stdout": proc.stdout,
            "stderr": proc.stderr}


class PeakChildrenRss:
    """Peak resident memory summed over this process's children, recursively (a run and
    every worker process it starts), sampled every ``interval`` seconds in a thread:

        with PeakChildrenRss() as memory:
            subprocess.run(...)
        memory.peak_gib
        memory.peak_gib_between(start, end)   # epoch seconds: one component's share of the run

    Every sample is kept with its time, so a peak can be laid on what ran then.
    """

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self.samples: list[tuple[float, int]] = []   # (time.time(), bytes)
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        import psutil

        me = psutil.Process()
        while not self._done.is_set():
            total = 0
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass  # exited between the listing and the read
            self.samples.append((time.time(), total))
            self._done.wait(self.interval)

    def __enter__(self) -> PeakChildrenRss:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling now (the peak so far is kept)."""
        self._done.set()
        self._thread.join(timeout=10)

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def peak_gib(self) -> float:
        return max((total for _, total in self.samples), default=0) / 2**30

    def peak_gib_between(self, start: float, end: float) -> float | None:
        """The peak of the samples taken from ``start`` to ``end`` (epoch seconds); None if none was."""
        inside = [total for at, total in self.samples if start <= at <= end]
        return max(inside) / 2**30 if inside else None


def shell_command(cmd: Sequence[str]) -> str:
    """``cmd`` as one would type it from the project root (python path shortened)."""
    parts = list(cmd)
    if parts and parts[0] == PYTHON:
        try:
            parts[0] = os.path.relpath(PYTHON, PROJECT_ROOT)
        except ValueError:
            pass
    return " ".join(shlex.quote(p) for p in parts)

"""Progress counters a long step publishes for the runner to show (examples done, of how many).

Why files: a step's work happens in Beam worker processes (``multi_processing``), in the
runner's own process (``in_memory``) or in a training process, and Beam's metrics are only
readable once a job is over. Each process that counts writes its running total to its own
small file in the folder ``PROGRESS_DIR_ENV`` names, at most once a second (an atomic
rename), and the runner's display (``pipeline/local/progress.py``) sums the files. Without
that variable (Kubeflow, tests, direct use) counting costs one attribute check per call.
"""
from __future__ import annotations

import json
import os
import threading
import time

#: The folder the local runner sets for the step that is running (inherited by workers).
PROGRESS_DIR_ENV = "PIPELINE_PROGRESS_DIR"
_WRITE_EVERY_S = 1.0


class _Counter:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.totals: dict[str, int] = {}
        self.written = 0.0
        self.folder: str | None = None


_counter = _Counter()


def count(what: str, n: int = 1, total: int | None = None) -> None:
    """Add ``n`` to this process's count of ``what`` (e.g. "examples decoded"); ``total``: how
    many there will be in all (the same number from every process), if known."""
    folder = os.environ.get(PROGRESS_DIR_ENV)
    if not folder:
        return
    with _counter.lock:
        if _counter.folder != folder:  # a new step: start from zero
            _counter.folder, _counter.counts, _counter.totals = folder, {}, {}
        _counter.counts[what] = _counter.counts.get(what, 0) + n
        if total is not None:
            _counter.totals[what] = total
        if time.monotonic() - _counter.written < _WRITE_EVERY_S:
            return
        _counter.written = time.monotonic()
        state = {"counts": dict(_counter.counts), "totals": dict(_counter.totals)}
    _write(folder, state)


def flush() -> None:
    """Write this process's counts now (e.g. at the end of a bundle or a pass)."""
    folder = os.environ.get(PROGRESS_DIR_ENV)
    if not folder or _counter.folder != folder:
        return
    with _counter.lock:
        state = {"counts": dict(_counter.counts), "totals": dict(_counter.totals)}
    _write(folder, state)


def _write(folder: str, state: dict) -> None:
    try:
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"{os.getpid()}.json")  # one file per process: its running totals
        tmp = f"{path}.tmp"
        with open(tmp, "w") as out:
            json.dump(state, out)
        os.replace(tmp, path)
    except OSError:
        pass  # progress is a display: never fail a step for it


def read(folder: str) -> tuple[dict[str, int], dict[str, int]]:
    """Counts summed over every process's file, and the totals (the largest one announced)."""
    counts: dict[str, int] = {}
    totals: dict[str, int] = {}
    try:
        names = [n for n in os.listdir(folder) if n.endswith(".json")]
    except OSError:
        return counts, totals
    for name in names:
        try:
            with open(os.path.join(folder, name)) as handle:
                state = json.load(handle)
        except (OSError, ValueError):
            continue  # replaced while read: next poll
        for what, n in state.get("counts", {}).items():
            counts[what] = counts.get(what, 0) + int(n)
        for what, n in state.get("totals", {}).items():
            totals[what] = max(totals.get(what, 0), int(n))
    return counts, totals

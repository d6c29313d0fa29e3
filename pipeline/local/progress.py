"""The progress of a running step on the terminal: counts done, rate and ETA.

The step's own counters (``stackenv/progress.py``: the image ExampleGen's images decoded
and examples written, records read by the Beam steps through tfx_bsl, the Trainer's steps)
are summed over every process that counts, once a second, by a daemon thread that reads
small files and never touches the run: it cannot block it, and it stops with the step.
Nothing is shown for a step shorter than ``FIRST_AFTER_S``. On a terminal the line is
rewritten in place; otherwise (a log file, a CI job) a plain log line every ``LOG_EVERY_S``.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from typing import TextIO

from stackenv import compat, progress

log = logging.getLogger("pipeline")

FIRST_AFTER_S = 10.0
LOG_EVERY_S = 30.0
_POLL_S = 1.0
_RATE_WINDOW_S = 15.0


def expected_records(split_counts: dict[str, int], node_id: str) -> dict[str, int]:
    """How many records a Beam step reads in all (``records read``), from the ExampleGen's
    split counts: StatisticsGen reads every split; Transform analyses train, then transforms
    every split; the Evaluator reads eval. Other steps: unknown (no ETA)."""
    from pipeline.graph import EVALUATOR, STATISTICS_GEN, TRANSFORM

    total = sum(split_counts.values())
    records = {STATISTICS_GEN: total, TRANSFORM: split_counts.get("train", 0) + total,
               EVALUATOR: split_counts.get("eval", 0)}.get(node_id)
    return {compat.RECORDS_READ: records} if records else {}


def describe(node_id: str, elapsed: float, counts: dict[str, int], totals: dict[str, int],
             history: list[tuple[float, dict[str, int]]]) -> str:
    """``ExampleGen 0:42 · images decoded 12,345/20,000 (62 %) 2,100/s ETA 0:04``: the
    counter that moved last is the one with a rate and an ETA (from the last seconds)."""
    parts = [f"{node_id} {_clock(elapsed)}"]
    active = _active(counts, history)
    for what, done in counts.items():
        total = totals.get(what)
        total = total if total and total >= done else None  # an expectation that was wrong: no ETA
        text = f"{what} {done:,}" + (f"/{total:,} ({100 * done / total:.0f} %)" if total else "")
        if what == active:
            rate = _rate(what, history)
            if rate:
                text += f" {rate:,.0f}/s"
                if total and total > done:
                    text += f" ETA {_clock((total - done) / rate)}"
        parts.append(text)
    return " · ".join(parts)


def _active(counts: dict[str, int], history: list[tuple[float, dict[str, int]]]) -> str | None:
    if not history:
        return next(iter(counts), None)
    previous = history[0][1]
    moved = [what for what in counts if counts[what] != previous.get(what, 0)]
    return moved[-1] if moved else None


def _rate(what: str, history: list[tuple[float, dict[str, int]]]) -> float:
    (t0, first), (t1, last) = history[0], history[-1]
    return (last.get(what, 0) - first.get(what, 0)) / (t1 - t0) if t1 > t0 else 0.0


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class StepProgress:
    """``with StepProgress("Trainer"):`` around a step: counters on, a display thread running."""

    def __init__(self, node_id: str, stream: TextIO | None = None, first_after: float = FIRST_AFTER_S,
                 log_every: float = LOG_EVERY_S, totals: dict[str, int] | None = None) -> None:
        self.node_id, self.first_after, self.log_every = node_id, first_after, log_every
        self.totals = dict(totals or {})  # expected counts the step does not announce itself
        self.stream = stream or sys.stderr
        self.tty = _is_tty(self.stream)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._show, name=f"progress-{node_id}", daemon=True)
        self._drawn = False
        self._folder = ""
        self._previous_env: str | None = None

    def __enter__(self) -> StepProgress:
        self._folder = tempfile.mkdtemp(prefix="pipeline-progress-")
        self._previous_env = os.environ.get(progress.PROGRESS_DIR_ENV)
        os.environ[progress.PROGRESS_DIR_ENV] = self._folder  # inherited by Beam's worker processes
        self._started = time.monotonic()
        self._thread.start()
        if self.tty:  # a log line written meanwhile starts on a cleared line, not after ours
            self._filter = _ClearLine(self)
            for handler in logging.getLogger().handlers:
                handler.addFilter(self._filter)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self._previous_env is None:
            os.environ.pop(progress.PROGRESS_DIR_ENV, None)
        else:
            os.environ[progress.PROGRESS_DIR_ENV] = self._previous_env
        if self.tty:
            for handler in logging.getLogger().handlers:
                handler.removeFilter(self._filter)
        self._clear()
        shutil.rmtree(self._folder, ignore_errors=True)

    def _show(self) -> None:
        history: list[tuple[float, dict[str, int]]] = []
        last_logged = 0.0
        while not self._stop.wait(_POLL_S):
            try:
                now = time.monotonic()
                counts, totals = progress.read(self._folder)
                totals = {**self.totals, **totals}
                history = [h for h in history if now - h[0] <= _RATE_WINDOW_S] + [(now, counts)]
                elapsed = now - self._started
                if elapsed < self.first_after:
                    continue
                line = describe(self.node_id, elapsed, counts, totals, history)
                if self.tty:
                    self.stream.write("\r\033[K  " + line)
                    self.stream.flush()
                    self._drawn = True
                elif now - last_logged >= self.log_every:
                    log.info("  %s", line)
                    last_logged = now
            except Exception:  # noqa: BLE001 - a display must never take the run down
                log.debug("progress display failed", exc_info=True)

    def _clear(self) -> None:
        if self._drawn:
            try:
                self.stream.write("\r\033[K")
                self.stream.flush()
            except (OSError, ValueError):
                pass
            self._drawn = False


class _ClearLine(logging.Filter):
    def __init__(self, owner: StepProgress) -> None:
        super().__init__()
        self.owner = owner

    def filter(self, record: logging.LogRecord) -> bool:
        self.owner._clear()
        return True


def _is_tty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, OSError, ValueError):
        return False

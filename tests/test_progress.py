"""The live progress of a long step: counters summed over real processes, the line it makes."""
from __future__ import annotations

import logging
import subprocess
import sys

from stackenv import progress

from pipeline.local.progress import StepProgress, describe

_COUNT_IN_A_CHILD = """
import sys
from stackenv import progress
for _ in range(int(sys.argv[1])):
    progress.count("images decoded", 1, total=100)
progress.flush()
"""


def test_counts_from_several_processes_add_up(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(tmp_path))
    for n in (30, 12):  # two Beam-worker-like processes, each with its own file
        subprocess.run([sys.executable, "-c", _COUNT_IN_A_CHILD, str(n)], check=True, timeout=120)
    counts, totals = progress.read(str(tmp_path))
    assert counts == {"images decoded": 42} and totals == {"images decoded": 100}


def test_counting_without_a_runner_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_DIR_ENV, raising=False)
    progress.count("examples written", 5)
    progress.flush()
    assert progress.read(str(tmp_path)) == ({}, {})


def test_the_line_has_done_total_rate_and_eta():
    # 600 more in the last 10 s -> 60/s; 1,000 left -> ETA 0:16 (rounded down).
    history = [(100.0, {"examples written": 400}), (110.0, {"examples written": 1000})]
    line = describe("ExampleGen", 75.0, {"examples written": 1000}, {"examples written": 2000}, history)
    assert line == "ExampleGen 1:15 · examples written 1,000/2,000 (50 %) 60/s ETA 0:16"


def test_only_the_counter_that_moves_gets_a_rate():
    history = [(0.0, {"images decoded": 500, "examples written": 0}),
               (5.0, {"images decoded": 500, "examples written": 50})]
    line = describe("ExampleGen", 3725.0, history[-1][1], {"images decoded": 500}, history)
    assert line == "ExampleGen 1:02:05 · images decoded 500/500 (100 %) · examples written 50 10/s"


def test_a_step_in_a_log_gets_plain_lines_and_leaves_no_counters(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="pipeline")
    with StepProgress("Trainer", stream=open(tmp_path / "log.txt", "w"), first_after=0, log_every=0) as step:
        folder = step._folder
        for _ in range(3):
            progress.count("training steps", 1, total=3)
        progress.flush()
        import time

        deadline = time.monotonic() + 30
        while not any("training steps 3/3" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.2)
    lines = [r.getMessage() for r in caplog.records if "Trainer" in r.getMessage()]
    assert any("training steps 3/3 (100 %)" in line for line in lines), lines
    assert not (tmp_path / "log.txt").read_text()  # not a TTY: nothing drawn in place
    import os

    assert progress.PROGRESS_DIR_ENV not in os.environ and not os.path.exists(folder)


def test_beam_steps_expect_the_records_they_read():
    from pipeline.local.progress import expected_records

    splits = {"train": 80, "eval": 20}
    assert expected_records(splits, "StatisticsGen") == {"records read": 100}
    assert expected_records(splits, "Transform") == {"records read": 180}  # analyse train, transform all
    assert expected_records(splits, "Evaluator") == {"records read": 20}
    assert expected_records(splits, "SchemaGen") == {}

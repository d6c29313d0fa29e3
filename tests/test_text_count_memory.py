"""A text run whose count model would not fit in memory stops at the Trainer, before it reads a window
(models/seq2seq/memory.py), with one paragraph, exit 2 and nothing pushed.

The run is the real CLI on a small corpus; only the memory figure the Trainer's check reads is set by
the test (a machine with 4 KiB left), since a corpus too large for this machine would take the suite's
hour. The figure's own sources, MemAvailable and cgroup v1/v2 limits, are tested in test_memory_check.py.
"""
import os
import subprocess
import sys
from pydoc_data.topics import topics

from conftest import PROJECT_ROOT, assert_paragraph

_RUN_WITH_LITTLE_MEMORY = """
import runpy, sys
import models.seq2seq.memory as memory
memory.available_bytes = lambda: (4096, "a figure this test sets")
sys.argv = ["pipeline", *sys.argv[1:]]
runpy.run_module("pipeline", run_name="__main__")
"""


def test_a_corpus_too_large_for_the_memory_stops_the_trainer_with_a_paragraph(tmp_path):
    longest = sorted(topics, key=lambda t: -len(topics[t]))
    (tmp_path / "book.txt").write_text(" ".join(" ".join(topics[longest[0]].split()).split()[:1500]), encoding="utf-8")
    output = tmp_path / "out"
    result = subprocess.run([sys.executable, "-c", _RUN_WITH_LITTLE_MEMORY, "run", "--model", "seq2seq", "--data",
                             str(tmp_path / "book.txt"), "--output", str(output), "--vocab-size", "200"],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=900)
    assert_paragraph(result, 2, "--data: the text Trainer's count model needs about", "train windows of 32+8 tokens",
                     "4 KiB available (a figure this test sets)", "lower --context-words")
    shown = result.stdout + result.stderr
    assert "✓ Transform done" in shown and "✗ Trainer failed after" in shown, shown[-3000:]
    serving = output / "serving"
    assert not serving.exists() or not any(serving.rglob("saved_model.pb")), list(serving.rglob("*"))
    assert os.path.isdir(output / "tfx")

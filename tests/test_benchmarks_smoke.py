"""The benchmarks still run: bench_input and bench_train_step in --quick mode, in subprocesses.

Checks the JSON they write has the expected keys and positive throughputs. Deliberately
NO assertions on times or ratios: they depend on the machine and its load.
"""
import json
import subprocess
import sys

import pytest
from conftest import PROJECT_ROOT

BENCH = PROJECT_ROOT / "benchmarks"


def _run_quick(script: str, json_path, timeout: int = 120) -> dict:
    result = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--json-out", str(json_path)],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return json.loads(json_path.read_text())


def _check_common(doc: dict, name: str) -> None:
    assert doc["benchmark"] == name
    assert doc["quick"] is True
    machine = doc["machine"]
    for key in ("date", "command", "cores", "cpu_model", "gpu", "packages", "git_commit"):
        assert key in machine, key
    assert machine["cores"] >= 1


@pytest.fixture(scope="module")
def input_doc(tmp_path_factory):
    return _run_quick("bench_input.py", tmp_path_factory.mktemp("bench") / "bench_input.json")


@pytest.fixture(scope="module")
def train_step_doc(tmp_path_factory):
    return _run_quick("bench_train_step.py", tmp_path_factory.mktemp("bench") / "bench_train_step.json")


def test_bench_input_quick(input_doc):
    _check_common(input_doc, "bench_input")
    assert input_doc["num_examples"] > 0
    assert set(input_doc["cases"]) == {"transform-1file", "sharded", "slow-storage", "cnn-fit"}
    for name, case in input_doc["cases"].items():
        expected = {"trainer", "naive"} if name == "cnn-fit" else {
            "trainer", "naive", "parallel_nocache", "sequential_cache", "trainer_block256"}
        assert expected <= set(case["variants"]), name
        for variant in case["variants"].values():
            assert variant["examples_per_s"]["median"] > 0
            assert variant["speedup_vs_naive"] > 0
    for key in ("trainer_vs_naive_transform_layout", "trainer_vs_naive_sharded",
                "trainer_vs_naive_slow_storage", "trainer_vs_naive_cnn_fit", "trainer_examples_per_s",
                "naive_examples_per_s"):
        assert input_doc["summary"][key] > 0, key


def test_bench_train_step_quick(train_step_doc):
    _check_common(train_step_doc, "bench_train_step")
    cnn = train_step_doc["models"]["cnn"]
    assert not cnn["errors"], cnn["errors"]
    assert {"eager", "graph", "xla"} <= set(cnn["modes"])
    for mode in cnn["modes"].values():
        assert mode["steps_per_s"] > 0
        assert mode["examples_per_s"] > 0
        assert mode["first_call_s"] > 0
    assert cnn["winner_steady_state"] in cnn["modes"]


def test_fix_ab_harness_reverts_every_fix_and_rejects_unknown_ones():
    """bench_pipeline --fix-ab runs the CLI through _patched_cli.py: every revert must load."""
    import os

    def patched(reverts, *args):
        return subprocess.run([sys.executable, str(BENCH / "_patched_cli.py"), *args], cwd=PROJECT_ROOT,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "BENCH_REVERT": reverts})

    result = patched("tf_keras_autograph,tfx_v1_import,transform_statistics,interpreter_exit", "run", "--help")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--transform-statistics" in result.stdout
    unknown = patched("no_such_fix", "run", "--help")
    assert unknown.returncode != 0 and "unknown BENCH_REVERT" in unknown.stderr


def test_bench_text_ingest_quick(tmp_path):
    """The text reader vs plain Python on a generated mixed-format folder: same documents found."""
    doc = _run_quick("bench_text_ingest.py", tmp_path / "bench_text_ingest.json")
    _check_common(doc, "bench_text_ingest")
    assert doc["same_documents"] is True and doc["reader"]["skipped"] == 0
    assert doc["reader"]["documents"] == doc["plain"]["documents"] == doc["documents"] > 0
    assert doc["reader_vs_plain"] > 0

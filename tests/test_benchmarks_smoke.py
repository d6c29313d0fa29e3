"""The benchmarks still run: bench_input and bench_train_step in --quick mode, in subprocesses.

Checks the JSON they write has the expected keys, and that every rate and ratio it reports is
what its own raw timings say (recomputed in the test). Deliberately NO assertions on the size
of times or ratios: they depend on the machine and its load.
"""
import json
import subprocess
import sys
from statistics import median

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
    """Every reported rate and ratio is what its raw timings say (recomputed here from samples_s)."""
    _check_common(input_doc, "bench_input")
    assert input_doc["num_examples"] > 0
    assert set(input_doc["cases"]) == {"transform-1file", "sharded", "slow-storage", "cnn-fit"}
    for name, case in input_doc["cases"].items():
        expected = {"trainer", "naive"} if name == "cnn-fit" else {
            "trainer", "naive", "parallel_nocache", "sequential_cache", "trainer_block256"}
        assert expected <= set(case["variants"]), name
        examples = case["examples_per_measurement"]
        naive = case["variants"]["naive"]["samples_s"]
        for variant_name, variant in case["variants"].items():
            samples = variant["samples_s"]
            assert samples and all(s > 0 for s in samples), (name, variant_name)
            assert variant["seconds"]["median"] == pytest.approx(median(samples))
            assert variant["examples_per_s"]["median"] == pytest.approx(median([examples / s for s in samples]))
            assert variant["speedup_vs_naive"] == pytest.approx(median(naive) / median(samples))
            assert variant["speedup_vs_naive_paired"] == pytest.approx(median([n / s for n, s in zip(naive, samples)]))
        assert case["trainer_vs_naive_speedup"] == case["variants"]["trainer"]["speedup_vs_naive"]
    cases, summary = input_doc["cases"], input_doc["summary"]
    for key, case in (("trainer_vs_naive_sharded", "sharded"), ("trainer_vs_naive_slow_storage", "slow-storage"),
                      ("trainer_vs_naive_cnn_fit", "cnn-fit")):
        assert summary[key] == cases[case]["trainer_vs_naive_speedup"], key
    layout = cases["transform-1file"]["variants"]
    assert summary["trainer_examples_per_s"] == layout["trainer"]["examples_per_s"]["median"]
    assert summary["naive_examples_per_s"] == layout["naive"]["examples_per_s"]["median"]
    assert summary["target_met"] == (min(summary["trainer_vs_naive_transform_layout"],
                                         summary["trainer_vs_naive_transform_layout_paired"]) >= 2.0)


def test_bench_train_step_quick(train_step_doc):
    """Each mode's rates follow from its step times, and the winner is the fastest of them."""
    _check_common(train_step_doc, "bench_train_step")
    cnn = train_step_doc["models"]["cnn"]
    assert not cnn["errors"], cnn["errors"]
    assert {"eager", "graph", "xla"} <= set(cnn["modes"])
    for mode_name, mode in cnn["modes"].items():
        step_s = mode["step_ms"]["median"] / 1000
        assert step_s > 0 and mode["first_call_s"] > 0, mode_name
        assert mode["steps_per_s"] == pytest.approx(1 / step_s)
        assert mode["examples_per_s"] == pytest.approx(cnn["batch_size"] / step_s)
        assert mode["est_pipeline_training_s"] == pytest.approx(
            mode["first_call_s"] + (cnn["pipeline_steps"] - 2) * step_s)
    assert cnn["winner_steady_state"] == max(cnn["modes"], key=lambda m: cnn["modes"][m]["steps_per_s"])
    assert cnn["winner_for_pipeline_run"] == min(cnn["modes"],
                                                 key=lambda m: cnn["modes"][m]["est_pipeline_training_s"])


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

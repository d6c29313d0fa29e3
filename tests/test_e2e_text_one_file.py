"""One text file, the most natural "continue my text" input, through the whole pipeline.

The split holds out blocks inside the one document (data/text_split.py), the model is pushed,
``generate`` goes on for the asked number of tokens, and the terminal shows only the
project's lines: the library noise goes to output/logs/.
"""
import json
import os
from pydoc_data.topics import topics

import pytest
from conftest import run_cli

from pipeline.config import PipelineConfig
from pipeline.results import mlmd
from pipeline.results.summary import split_counts_from_statistics

pytestmark = pytest.mark.e2e

# Written by C++ (absl, grappler) or as Python warnings; none may reach the terminal.
NOISE = ("absl::InitializeLog", "op_level_cost_estimator", "W0000", "FutureWarning", "cuda_dnn.cc")
# The gate a user gets: the served model contains its Kneser-Ney reference (the network takes no share after
# 12 steps), so the default gate asks for at least that reference's hits and the margin over the bigram's.
RUN_ARGS = ("--model", "seq2seq", "--train-steps", "12", "--eval-steps", "4", "--vocab-size", "300")


@pytest.fixture(scope="module")
def one_file_run(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("one-file")
    longest = sorted(topics, key=lambda t: -len(topics[t]))
    text = " ".join(" ".join(topics[name].split()) for name in longest[:2])
    book = corpus / "book.txt"
    book.write_text(" ".join(text.split()[:3000]), encoding="utf-8")
    output = tmp_path_factory.mktemp("one-file-run")
    result = run_cli("run", "--data", book, "--output", output, *RUN_ARGS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return PipelineConfig(model="seq2seq", output_dir=str(output)), result


def test_one_file_is_split_into_train_and_eval_and_pushed(one_file_run):
    config, result = one_file_run
    run = mlmd.latest_run(mlmd.open_store(mlmd.sqlite_config(config.metadata_path)), config.pipeline_name)
    counts = split_counts_from_statistics(run["StatisticsGen"].outputs["statistics"][0].uri)
    assert set(counts) == {"train", "eval"} and counts["train"] > 0 and counts["eval"] > 0
    assert 0.15 <= counts["eval"] / (counts["train"] + counts["eval"]) <= 0.25, counts
    assert "Split: blocks inside documents" in result.stdout
    # Top-1 and the figures on known next words (what generate can emit) under the headline (issue 43).
    also = next(line for line in result.stdout.splitlines() if line.startswith("  also: "))
    assert "top-1 0." in also and "on known next words (what generate can emit): top-5 0." in also
    assert f"Pushed: {config.serving_model_dir}" in result.stdout


def test_pushed_model_carries_its_reference_scores(one_file_run):
    config, _ = one_file_run
    from artifacts.serving_dir import latest_version_dir

    run = mlmd.latest_run(mlmd.open_store(mlmd.sqlite_config(config.metadata_path)), config.pipeline_name)
    model_run = run["Trainer"].outputs["model_run"][0].uri
    with open(os.path.join(model_run, "baselines.json")) as handle:
        measured = json.load(handle)
    with open(os.path.join(latest_version_dir(config.serving_model_dir), "assets.extra", "references.json")) as handle:
        references = json.load(handle)
    assert references["metric"] == "sparse_top_k_categorical_accuracy"
    assert references["references"] == {"unigram": measured["unigram_top5"], "bigram": measured["bigram_top5"],
                                        "kneser_ney": measured["kneser_ney"]["kneser_ney_top5"]}
    assert references["contained"] == ["kneser_ney"]   # the served model's count part
    assert references["margin"] == 0.01  # the default --gate-margin
    # Counted over the whole train text (~2,400 of the 3,000 words), not one event per window: its order (3-5),
    # where it counts (word starts, every position, both) and its shares cross-fitted on train (count_reference.py).
    fitted = measured["kneser_ney"]
    assert fitted["order"] in (3, 4, 5) and fitted["train_tokens"] >= 2000
    # Transform marked where each word starts: most tokens of prose, not the punctuation inside words.
    assert 0.6 * fitted["train_tokens"] < fitted["word_start_events"] < fitted["train_tokens"], fitted
    assert fitted["word_start_share"] in (0.0, 0.5, 1.0)
    assert fitted["description"].startswith(f"interpolated modified Kneser-Ney {fitted['order']}-gram")
    # The served model is that reference with the network mixed on top: its count shares are the reference's.
    with open(os.path.join(latest_version_dir(config.serving_model_dir), "assets.extra", "training.json")) as handle:
        weights = json.load(handle)["blend"]["weights"]
    rest = 1 - weights["network"]
    assert weights["cache"] == pytest.approx(rest * fitted["cache_share"])
    assert weights["unknown"] == pytest.approx(rest * fitted["unknown_share"])
    assert all(0 < value < 1 for value in references["references"].values())


def test_generate_goes_on_for_max_tokens_and_stops_on_request(one_file_run):
    config, _ = one_file_run
    result = run_cli("generate", "--model-dir", config.serving_model_dir, "the for statement is", "--max-tokens", "32")
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = result.stdout.strip().splitlines()
    assert len(line.split(" -> ", 1)[1].split()) == 32, line
    stopped = run_cli("generate", "--model-dir", config.serving_model_dir, "the for statement is",
                      "--max-tokens", "32", "--stop-at", ". , the")
    assert stopped.returncode == 0, stopped.stderr[-3000:]
    tokens = stopped.stdout.strip().split(" -> ", 1)[1].split()
    assert 1 <= len(tokens) <= 32 and (tokens[-1] in {".", ",", "the"} or len(tokens) == 32), tokens
    for output in (result.stdout + result.stderr, stopped.stdout + stopped.stderr):
        assert not [n for n in NOISE if n in output], output


def test_run_terminal_shows_only_project_lines(one_file_run):
    config, result = one_file_run
    terminal = result.stdout + result.stderr
    assert not [n for n in NOISE if n in terminal], terminal[-3000:]
    assert "Run summary" in result.stdout
    # The noise went to the run's log file instead, where bug reports find it (-v shows it).
    from pipeline import quiet

    with open(quiet.log_path(config.output_dir), encoding="utf-8") as handle:
        logged = handle.read()
    assert " run --data " in logged
    assert [n for n in NOISE if n in logged], logged[-3000:]


def test_the_default_gate_blesses_the_one_document_model(one_file_run):
    """The gate a user gets decided the push: the served model contains its Kneser-Ney reference, and was
    asked for at least its hits on the same eval windows (not to beat a part of itself by a margin)."""
    _, result = one_file_run
    gate = next(line for line in result.stdout.splitlines() if line.startswith("Gate: "))
    assert "kneser_ney" in gate and "which the model contains" in gate and gate.endswith(")") and "-> passed" in gate
    assert "Blessed: yes" in result.stdout


def test_generate_shows_the_probability_the_model_gave_each_token(one_file_run):
    """``--show-scores``: each token with the served model's probability of it; the first one is the same
    probability serving_default gives that token after the prompt (read independently, from a tf.Example)."""
    import re

    import tensorflow as tf

    from artifacts.serving_dir import latest_version_dir
    from data.text_features import CONTEXT

    config, _ = one_file_run
    prompt = "the for statement is"
    result = run_cli("generate", "--model-dir", config.serving_model_dir, prompt, "--max-tokens", "12", "--show-scores")
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = result.stdout.strip().splitlines()
    scored = re.findall(r"(\S+) \((\d\.\d\d)\)", line.split(" -> ", 1)[1])
    assert len(scored) == 12, line   # the continuation goes on by 12 tokens
    assert all(0 < float(p) <= 1 for _, p in scored) and "[geometric mean 0." in line
    model = tf.saved_model.load(latest_version_dir(config.serving_model_dir))
    example = tf.train.Example(features=tf.train.Features(feature={
        CONTEXT: tf.train.Feature(bytes_list=tf.train.BytesList(value=[prompt.encode()]))}))
    served = model.signatures["serving_default"](examples=tf.constant([example.SerializeToString()]))
    top = dict(zip((t.decode() for t in served["top_k_tokens"].numpy()[0]), served["top_k_probabilities"].numpy()[0]))
    first, shown = scored[0]
    assert first in top, (first, top)
    assert abs(top[first] - float(shown)) <= 0.005, (first, top[first], shown)


def test_generation_benchmark_judges_both_continuations_on_held_out_text(one_file_run, tmp_path):
    """benchmarks/bench_generation.py on this run: prompts from the eval split, a judge fitted on its other
    half. With no network share (12 steps) the counts alone are the served model, so every continuation is
    the same and so is its score: the comparison itself adds nothing."""
    import subprocess
    import sys

    from conftest import PROJECT_ROOT

    config, _ = one_file_run
    out = tmp_path / "generation.json"
    result = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "bench_generation.py"),
                             config.output_dir, "--prompts", "20", "--tokens", "6",
                             "--json-out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["mix"][0] == 0.0 and 2 <= report["prompts"] <= 20 and report["truth"] < 0
    for mode in report["modes"].values():
        assert mode["identical"] == report["prompts"] and mode["served"] == mode["counts_alone"] < 0
        assert mode["difference"][:1] == [0.0]
    assert "served - counts +0.000" in result.stdout


def test_learning_curve_benchmark_reproduces_the_trainers_held_out_windows_and_counts(one_file_run, tmp_path):
    """benchmarks/text_learning_curve.py on this run: it splits the train windows and fits the counts as the
    Trainer does, so the counts' held-out top-5 it reports is the one the Trainer recorded for its mix fit
    (training.json), to the last window; then each variant trains and is scored at its checkpoints."""
    import subprocess
    import sys

    from conftest import PROJECT_ROOT

    from artifacts.serving_dir import latest_version_dir

    config, _ = one_file_run
    with open(os.path.join(latest_version_dir(config.serving_model_dir), "assets.extra", "training.json")) as f:
        recorded = json.load(f)["blend"]
    out = tmp_path / "curve.json"
    result = subprocess.run([sys.executable, str(PROJECT_ROOT / "benchmarks" / "text_learning_curve.py"),
                             config.output_dir, "--quick", "--variants", "dropout=0.5;dropout=0.0,units=32",
                             "--json-out", str(out)], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["held_out_windows"] == recorded["held_out_windows"] > 0
    assert [curve["variant"] for curve in report["curves"]] == [{"dropout": 0.5}, {"dropout": 0.0, "units": 32}]
    for curve in report["curves"]:
        assert curve["curve"] and all(point["steps"] > 0 for point in curve["curve"])
        for point in curve["curve"]:
            assert point["counts"] == pytest.approx(recorded["components"]["counts"]["top5"], abs=1e-12)
            assert 0.0 <= point["network"] <= 1.0 and point["gain"] == pytest.approx(point["mix"] - point["counts"])
            assert point["share"] > 0 or point["mix"] == point["counts"]  # no share: the counts themselves


def test_corpora_benchmark_reads_back_what_the_run_summary_printed(one_file_run, tmp_path):
    """benchmarks/text_corpora.py --read on this run: what it reads from the run's artifacts (the Evaluator's
    metrics and gate, the Trainer's mix, the blessing, the serving folder) is what the run's terminal said."""
    import importlib.util
    import subprocess
    import sys

    from conftest import PROJECT_ROOT

    config, run = one_file_run
    script = PROJECT_ROOT / "benchmarks" / "text_corpora.py"
    out = tmp_path / "corpora.json"
    result = subprocess.run([sys.executable, str(script), "--read", config.output_dir, "--json-out", str(out)],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["rows"]
    low, high = row["interval"]
    assert (f"Top-5 next-word accuracy (overall): {row['served']:.4f} [95% CI {low:.4f}-{high:.4f}] "
            f"on {row['eval_windows']} eval examples") in run.stdout
    assert row["counts_name"] == "kneser_ney" and row["contained"]
    references = next(line for line in run.stdout.splitlines() if line.startswith("Reference predictors"))
    assert f"kneser_ney {row['counts']:.4f} [95% CI" in references
    assert f"  kneser_ney: {row['counts_description']}\n" in run.stdout
    paired = [line for line in run.stdout.splitlines() if line.endswith("(paired)")]
    if row["gain"] is None:   # no network share: the served model is its counts, nothing to pair
        assert row["mix"]["network"] == 0.0 and not paired, paired
    else:
        gain_low, gain_high = row["gain_interval"]
        assert paired == [f"  The served model over kneser_ney, which it contains, on {row['paired_windows']:,} of the "
                          f"same eval windows: {row['gain']:+.4f} [95% CI {gain_low:+.4f}, {gain_high:+.4f}] (paired)"]
    training = next(line for line in run.stdout.splitlines() if line.startswith("Training: "))
    if "served mix" in training:
        assert f"network {row['mix']['network']:.2f}" in training, training
    else:   # the line leaves out a mix without the network
        assert row["mix"].get("network", 0.0) == 0.0, row["mix"]
    assert row["blessed"] and "Blessed: yes" in run.stdout
    assert [f"Pushed: {path}" for path in row["pushed"]] == [line for line in run.stdout.splitlines()
                                                             if line.startswith("Pushed: ")]
    # The corpus line the benchmark reads from a run it starts: one document.
    spec = importlib.util.spec_from_file_location("text_corpora", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module._CORPUS_LINE.search(run.stdout).group(1) == "1"

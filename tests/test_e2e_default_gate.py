"""The default gate decides real runs (issue 36): no ``--gate-margin`` or ``--min-accuracy`` given, the
reference predictors the Trainer measured set the bar, and the summary and the serving directory show
the verdict.

Both data sets are easy enough that the gate reference is (near) perfect, so the bar sits at the
metric's maximum (models/common/references.py ``gate_value``): a model that is not perfect is refused,
and a perfect one ties the perfect reference and is pushed.

- seq2seq, a counting corpus (twelve number words in a cycle): bigram counts predict every next word.
  One training step is refused; forty steps reach top-5 accuracy 1.0 and are pushed; then (slow)
  a one-step candidate with the reference gate lowered (``--gate-margin -1``) is refused by
  ``--max-regression`` alone, against the model just served.
- cnn, the digits 3 and 9 (scikit-learn's, as PNG files): logistic regression separates them on the
  eval split, the model after one step (and its kernel head, models/cnn/kernel_head.py) does not.
"""
import json
import os
import re

import numpy as np
import pytest
import tensorflow_model_analysis as tfma
from conftest import run_cli
from PIL import Image

from artifacts import serving_dir
from pipeline import graph
from pipeline.config import PipelineConfig
from pipeline.results import mlmd

pytestmark = pytest.mark.e2e

NUMBERS = "one two three four five six seven eight nine ten eleven twelve".split()


def _counting_corpus(root):
    """Ten documents counting one..twelve over and over, each from its own starting word."""
    root.mkdir()
    for doc in range(10):
        words = [NUMBERS[(doc + i) % len(NUMBERS)] for i in range(240)]
        (root / f"count-{doc}.txt").write_text(" ".join(words) + "\n", encoding="utf-8")
    return root


def _digit_folder(root, classes):
    from sklearn.datasets import load_digits

    digits = load_digits()
    for i, (image, target) in enumerate(zip(digits.images, digits.target)):
        if target in classes:
            folder = root / str(target)
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray((image * 255 / 16).astype(np.uint8), mode="L").save(folder / f"{i}.png")
    return root


def _run(*args):
    result = run_cli("run", *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return result.stdout


def _versions(config):
    return serving_dir.list_versions(config.serving_model_dir) if os.path.isdir(config.serving_model_dir) else []


def _number(pattern, text):
    found = re.search(pattern, text)
    assert found, (pattern, text[-3000:])
    return float(found.group(1))


@pytest.fixture(scope="module")
def counting_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("counting")
    corpus, output = _counting_corpus(root / "corpus"), root / "out"
    config = PipelineConfig(model="seq2seq", output_dir=str(output))
    common = ("--model", "seq2seq", "--data", corpus, "--output", output)
    refused = _run(*common, "--train-steps", "1")
    after_refused = _versions(config)
    blessed = _run(*common, "--train-steps", "40")
    return config, common, {"refused": (refused, after_refused), "blessed": (blessed, _versions(config))}


def test_seq2seq_one_step_is_refused_by_the_perfect_bigram_reference(counting_runs):
    config, _, runs = counting_runs
    out, versions = runs["refused"]
    assert "Reference predictors (top-5 next-word accuracy on the same eval split): unigram 0." in out
    assert "bigram 1.0000" in out
    overall = _number(r"Top-5 next-word accuracy \(overall\): (\d\.\d+)", out)
    assert overall < 1.0
    assert ("Gate: top-5 next-word accuracy >= 1.0000 (bigram 1.0000 + margin 0.0100, capped at the metric's "
            f"maximum; floor 0.36) -> FAILED ({overall:.4f})") in out
    assert "Blessed: NO (top-5 next-word accuracy >= 1.0000," in out
    assert f"  - sparse_top_k_categorical_accuracy (overall) = {overall:.4f} fails the minimum 1.0" in out
    assert f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)" in out
    assert versions == []


def test_seq2seq_trained_longer_ties_the_perfect_reference_and_is_pushed(counting_runs):
    config, _, runs = counting_runs
    out, versions = runs["blessed"]
    assert "Top-5 next-word accuracy (overall): 1.0000" in out
    assert ("Gate: top-5 next-word accuracy >= 1.0000 (bigram 1.0000 + margin 0.0100, capped at the metric's "
            "maximum; floor 0.36) -> passed (1.0000)") in out
    assert "Blessed: yes (top-5 next-word accuracy >= 1.0000," in out
    assert "train longer" not in out  # a perfect score ties a perfect reference: nothing left to gain
    assert len(versions) == 1, versions
    version_dir = os.path.join(config.serving_model_dir, str(versions[0]))
    assert f"Pushed: {version_dir}" in out
    assert os.path.isfile(os.path.join(version_dir, "saved_model.pb"))


def test_push_info_holds_the_evaluations_overall_metrics(counting_runs):
    """push_info.json's metrics are the candidate's overall TFMA metrics, read here with TFMA itself."""
    config, _, runs = counting_runs
    (version,) = runs["blessed"][1]
    with open(os.path.join(config.serving_model_dir, str(version), "push_info.json")) as handle:
        info = json.load(handle)
    assert info["version"] == version
    evaluation_uri = re.search(r"^Evaluation: (.+)$", runs["blessed"][0], re.MULTILINE).group(1)
    result = tfma.load_eval_result(evaluation_uri)
    values = next(metrics for key, metrics in result.slicing_metrics if key == ())[""][""]
    overall = {name: value["doubleValue"] for name, value in values.items() if "doubleValue" in value}
    assert info["metrics"] == pytest.approx(overall)
    assert info["metrics"]["sparse_top_k_categorical_accuracy"] == 1.0
    assert info["metrics"]["example_count"] == _number(r"on (\d+) eval examples", runs["blessed"][0])


@pytest.mark.slow  # a third run
def test_seq2seq_candidate_refused_by_max_regression_against_the_served_model(counting_runs):
    """The reference gate lowered to its floor 0: only the change limit vs. the served model refuses."""
    config, common, runs = counting_runs
    out = _run(*common, "--train-steps", "1", "--seed", "7", "--gate-margin", "-1", "--min-accuracy", "0")
    versions = _versions(config)
    overall = _number(r"Top-5 next-word accuracy \(overall\): (\d\.\d+)", out)
    assert overall < 0.99
    assert "Served model (baseline) on the same data: 1.0000" in out
    assert re.search(r"Gate: top-5 next-word accuracy >= 0\.0000 \(the floor --min-accuracy; bigram \+ margin is "
                     r"0\.0000; floor 0\.0\) -> passed", out), out[-3000:]
    assert "Blessed: NO (top-5 next-word accuracy >= 0.0000, at most 0.01 below the served model)" in out
    reasons = [line for line in out.splitlines() if line.startswith("  - ")]
    assert len(reasons) == 1 and re.fullmatch(r"  - sparse_top_k_categorical_accuracy \(overall\) = -0\.\d{4} fails "
                                              r"the change limit vs\. the served model \(-0\.01\)", reasons[0]), reasons
    assert f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)" in out
    assert versions == runs["blessed"][1]
    run = mlmd.latest_run(mlmd.open_store(mlmd.sqlite_config(config.metadata_path)), config.pipeline_name)
    assert run[graph.EVALUATOR].outputs["blessing"][0].custom_properties["blessed"].int_value == 0


def test_cnn_one_step_on_digits_3_and_9_is_refused_by_the_logistic_reference(tmp_path):
    source = _digit_folder(tmp_path / "images", {3, 9})
    config = PipelineConfig(model="cnn", output_dir=str(tmp_path / "out"))
    out = _run("--data", source, "--output", tmp_path / "out", "--image-size", "8", "--channels", "1",
               "--train-steps", "1")
    logistic = _number(r"Reference predictors \(accuracy on the same eval split\): .*logistic_regression "
                       r"(\d\.\d+)", out)
    overall = _number(r"Accuracy \(overall\): (\d\.\d+)", out)
    bar = min(logistic + 0.01, 1.0)
    assert overall < bar, out[-3000:]
    gate = (rf"Gate: accuracy >= {bar:.4f} \(logistic_regression {logistic:.4f} \+ margin 0\.0100"
            rf"(, capped at the metric's maximum)?; floor 0\.0\) -> FAILED \({overall:.4f}\)")
    assert re.search(gate, out), out[-3000:]
    assert f"Blessed: NO (accuracy >= {bar:.4f}," in out
    assert f"  - sparse_categorical_accuracy (overall) = {overall:.4f} fails the minimum " in out
    assert f"Pushed: nothing (serving dir {config.serving_model_dir} unchanged)" in out
    assert _versions(config) == []

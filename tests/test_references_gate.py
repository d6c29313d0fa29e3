"""Reference predictors written into the model, and the Evaluator's gate built on them."""
import json

from stackenv.tfma import tfma

import numpy as np
import pytest
from conftest import DIGIT_FACTS
from google.protobuf import json_format

from artifacts import tfma_results
from components import reference_gate
from models.cnn.evaluation import ACCURACY, eval_config
from models.common import references
from pipeline.results import gate_summary


def test_classifier_references_on_separable_data():
    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, 300)
    x = rng.normal(size=(300, 5)) + np.eye(3, 5)[y] * 4
    y[:200][y[:200] == 2] = 0  # majority class in train: 0
    refs = references.classifier_references(x[:200], y[:200], x[200:], y[200:], seed=1)
    assert set(refs) == {"majority", "logistic_regression", "svm_rbf"}
    assert refs["majority"] == pytest.approx(np.mean(y[200:] == 0))
    assert refs["logistic_regression"] > refs["majority"] + 0.2 and refs["svm_rbf"] > refs["majority"] + 0.2


def test_the_svm_on_a_blas_kernel_scores_as_libsvm_on_its_own():
    """``rbf_svm_accuracy`` computes the RBF kernel itself (in blocks, support vectors only): the score is
    that of sklearn's ``SVC(kernel="rbf", gamma="scale")`` on overlapping classes, where some examples fail."""
    from sklearn.svm import SVC

    rng = np.random.RandomState(3)
    y = rng.randint(0, 4, 900)
    x = rng.normal(size=(900, 40)) + np.eye(4, 40)[y] * 1.5
    xt, yt, xe, ye = x[:500], y[:500], x[500:], y[500:]
    expected = float(np.mean(SVC(C=10.0, gamma="scale", random_state=0).fit(xt, yt).predict(xe) == ye))
    assert 0.3 < expected < 0.95   # a score that more than a tie-break could move
    assert references.rbf_svm_accuracy(xt, yt, xe, ye) == pytest.approx(expected, abs=1e-12)
    blocks = references.KERNEL_BLOCK
    try:
        references.KERNEL_BLOCK = 7   # a last block shorter than the others
        assert references.rbf_svm_accuracy(xt, yt, xe, ye) == pytest.approx(expected, abs=1e-12)
    finally:
        references.KERNEL_BLOCK = blocks


def test_subsample_is_bounded_and_seeded():
    assert len(references.subsample(10, 20, 0)) == 10
    picked = references.subsample(1000, 50, 3)
    assert len(picked) == 50 and list(picked) == sorted(set(picked))
    assert list(picked) == list(references.subsample(1000, 50, 3))


def test_references_fitted_beside_training_give_the_same_scores_and_errors():
    """The Trainer fits its references in a thread while the network trains (``references.beside``): the
    caller goes on at once, the scores are those of a direct call, and a failure reaches the caller."""
    import threading

    rng = np.random.RandomState(0)
    y = rng.randint(0, 3, 300)
    x = rng.normal(size=(300, 5)) + np.eye(3, 5)[y] * 4
    training_started = threading.Event()

    def fit(*args):
        # Waits for the caller's next step: a ``beside`` that ran ``fit`` before returning would never get here.
        assert training_started.wait(timeout=30), "beside() did not return before the fit ended"
        return references.classifier_references(*args, seed=1)

    job = references.beside(fit, x[:200], y[:200], x[200:], y[200:])
    training_started.set()
    assert job.result(timeout=60) == references.classifier_references(x[:200], y[:200], x[200:], y[200:], seed=1)

    def broken():
        raise ValueError("no classes")

    with pytest.raises(ValueError, match="no classes"):
        references.beside(broken).result(timeout=30)


def _model_with_references(tmp_path, value, margin=0.02, eval_examples=None):
    model_dir = tmp_path / "model"
    references.write_references(str(model_dir), ACCURACY, {"majority": 0.39, "logistic_regression": value,
                                                          "svm_rbf": 0.7}, "logistic_regression", margin,
                                extra={"eval_examples": eval_examples} if eval_examples else None)
    return str(model_dir)


def _lower_bound(config_json):
    config = json_format.Parse(config_json, tfma.EvalConfig())
    for spec in config.metrics_specs:
        for metric in spec.metrics:
            for per_slice in metric.per_slice_thresholds:
                if reference_gate.metric_name(metric) == ACCURACY:
                    return per_slice.threshold.value_threshold.lower_bound.value
    raise AssertionError("no accuracy threshold")


def test_gate_raises_the_floor_to_reference_plus_margin(tmp_path):
    model_dir = _model_with_references(tmp_path, 0.61, margin=0.05)
    config = json_format.MessageToJson(eval_config(6, min_accuracy=0.2, max_regression=0.01))
    raised = reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "evaluation"))
    assert _lower_bound(raised) == pytest.approx(0.66)
    gate = reference_gate.read_gate(str(tmp_path / "evaluation"))
    assert gate["threshold"] == pytest.approx(0.66) and gate["floor"] == pytest.approx(0.2)
    assert gate["gate_reference"] == "logistic_regression" and gate["references"]["svm_rbf"] == 0.7
    # The summary says which check applied and whether the model passed it, with the numbers.
    passed = gate_summary.gate_lines(gate, 0.70, "Accuracy")
    failed = gate_summary.gate_lines(gate, 0.64, "Accuracy")
    assert passed == ["Gate: accuracy >= 0.6600 (logistic_regression 0.6100 + margin 0.0500; floor 0.2) "
                      "-> passed (0.7000)", "  Rule: " + references.gate_rule(0.05)]
    assert "-> FAILED (0.6400)" in failed[0]


def test_a_perfect_reference_asks_for_a_tie_not_more(tmp_path):
    """An easy set where the logistic reference scores 1.0 on the same 200,000 examples as the model: reference
    + margin would be 1.01, which no model reaches, and the old cap at 1.0 asked for a perfect score whatever the
    evidence. Counted as one error on 200,000, the reference asks for half an error more: a tie passes, and one
    error is too few examples to tell from the reference (tests/test_gate_rule.py has the other cases)."""
    model_dir = _model_with_references(tmp_path, 1.0, margin=0.01, eval_examples=200_000)
    config = json_format.MessageToJson(eval_config(6, min_accuracy=0.0, max_regression=0.01))
    raised = reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "evaluation"), 200_000)
    assert _lower_bound(raised) == pytest.approx(1 - 0.5 / 200_000) and _lower_bound(raised) < 1.0
    gate = reference_gate.read_gate(str(tmp_path / "evaluation"))
    assert gate_summary.gate_lines(gate, 1.0, "Accuracy", 200_000)[0].startswith(
        "Gate: accuracy >= 0.999998 (logistic_regression 1.0000, counted as one error on 200,000: 0.999995 + "
        "2.5e-06, 50% of its error, less than the margin 0.0100; floor 0.0) -> passed (1.0000")
    assert "-> FAILED (0.9900)" in gate_summary.gate_lines(gate, 0.99, "Accuracy", 200_000)[0]
    # One error in 200,000: not enough evidence (by hand: Wilson centre 0.9999854, half-width 0.0000137), and
    # the values carry the decimals that tell them from the threshold instead of reading "1.0000".
    assert gate_summary.gate_lines(gate, 199_999 / 200_000, "Accuracy", 200_000)[0].endswith(
        "-> NOT ENOUGH EVIDENCE (0.99999, 95% interval 0.99997-0.999999 on 200000 eval examples contains the "
        "threshold)")


def test_a_higher_floor_wins_and_a_model_without_references_keeps_its_config(tmp_path):
    model_dir = _model_with_references(tmp_path, 0.5)
    config = json_format.MessageToJson(eval_config(6, min_accuracy=0.9, max_regression=0.01))
    raised = reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "e1"))
    assert _lower_bound(raised) == pytest.approx(0.9)
    assert "the floor --min-accuracy" in gate_summary.gate_lines(
        reference_gate.read_gate(str(tmp_path / "e1")), 0.95, "Accuracy")[0]
    unchanged = reference_gate.apply_reference_gate(config, str(tmp_path / "no-model"), str(tmp_path / "e2"))
    assert unchanged == config
    assert reference_gate.read_gate(str(tmp_path / "e2"))["references"] is None


def test_metric_names_follow_tfma():
    assert reference_gate.metric_name(tfma.MetricConfig(class_name="SparseCategoricalAccuracy")) == ACCURACY
    assert reference_gate.metric_name(tfma.MetricConfig(class_name="SparseTopKCategoricalAccuracy")) == \
        "sparse_top_k_categorical_accuracy"
    family_metric = tfma.MetricConfig(class_name="NextTokenTopKAccuracy", module="models.seq2seq.metrics")
    assert reference_gate.metric_name(family_metric) == "sparse_top_k_categorical_accuracy"
    named = tfma.MetricConfig(class_name="X", config=json.dumps({"name": "top5"}))
    assert reference_gate.metric_name(named) == "top5"


def test_unreadable_or_incomplete_references_are_ignored(tmp_path):
    path = tmp_path / "m" / references.ASSETS_EXTRA
    path.mkdir(parents=True)
    (path / references.REFERENCES_FILE).write_text("{not json")
    assert references.read_references(str(tmp_path / "m")) is None
    (path / references.REFERENCES_FILE).write_text(json.dumps({"references": {"a": 1}, "gate_reference": "b"}))
    assert references.read_references(str(tmp_path / "m")) is None
    with pytest.raises(ValueError, match="gate reference"):
        references.write_references(str(tmp_path / "n"), ACCURACY, {"a": 0.1}, "b", 0.0)


def test_the_gate_is_generic_across_families(tmp_path):
    """The seq2seq family writes the same file for its top-5 metric (bigram reference)."""
    from models.seq2seq.evaluation import eval_config as seq2seq_eval_config

    metric = "sparse_top_k_categorical_accuracy"
    model_dir = str(tmp_path / "model")
    references.write_references(model_dir, metric, {"unigram": 0.2, "bigram": 0.35}, "bigram", 0.01)
    config = json_format.MessageToJson(seq2seq_eval_config(0.1, 0.01))
    raised = json_format.Parse(reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "e")),
                               tfma.EvalConfig())
    bounds = [t.threshold.value_threshold.lower_bound.value for spec in raised.metrics_specs
              for m in spec.metrics if reference_gate.metric_name(m) == metric for t in m.per_slice_thresholds]
    assert bounds == [pytest.approx(0.36)]
    assert reference_gate.read_gate(str(tmp_path / "e"))["gate_reference"] == "bigram"


def test_references_are_one_summary_line_with_a_warning_when_none_is_beaten():
    payload = {"references": {"unigram": 0.21, "bigram": 0.41}, "gate_reference": "bigram", "margin": 0.0}
    label = "Top-5 next-word accuracy"
    assert gate_summary.references_lines(payload, label, 0.45) == [
        "Reference predictors (top-5 next-word accuracy on the same eval split): unigram 0.2100, bigram 0.4100"]
    [_, warning] = gate_summary.references_lines(payload, label, 0.40)
    # No training record: no diagnosis (pipeline/results/advice.py), and no blind "train longer".
    assert warning == ("  WARNING: the model (0.4000) does not beat the best reference predictor (bigram 0.4100); "
                       "the training record shows no clear cause: compare `tensorboard` curves, or add data.")
    assert gate_summary.references_lines(None, label, 0.4) == []
    perfect = {"references": {"unigram": 0.4, "bigram": 1.0}, "gate_reference": "bigram", "margin": 0.01}
    assert len(gate_summary.references_lines(perfect, label, 1.0)) == 1  # a tie at 1.0: nothing to advise
    assert "does not beat the best reference predictor (bigram 1.0000)" in gate_summary.references_lines(
        perfect, label, 0.99)[1]


def test_the_training_line_names_the_regime_each_family_records():
    early = {"regime": "early_stopping", "best_epoch": 7, "epochs_run": 10, "steps_per_epoch": 50,
             "stopped_early": True, "holdout_examples": 120, "class_weights": False}
    assert gate_summary.training_line(early).startswith(
        "Training: kept step 350 of 500 (checked every 50 steps; stopped early")
    # The text model's budget of 20,000 steps in 6 checks of 3,334: the last check comes at the budget's end.
    budget = {**early, "best_epoch": 6, "epochs_run": 6, "steps_per_epoch": 3334, "steps": 20000,
              "stopped_early": False}
    assert gate_summary.training_line(budget).startswith(
        "Training: kept step 20000 of 20000 (checked every 3334 steps; ran to the step budget")
    # A slower machine: the 30-minute budget cut the fifth check at step 14,000.
    timed = {**budget, "best_epoch": 5, "epochs_run": 5, "steps_run": 14000, "stopped_at_time_budget": True,
             "time_budget_s": 1800}
    assert gate_summary.training_line(timed).startswith(
        "Training: kept step 14000 of 14000 (checked every 3334 steps; stopped at the 30-minute training budget")
    kept = {**early, "kernel_head": {"kept": True, "why": "auto", "centers": 480, "holdout_accuracy": 0.85,
                                     "softmax_holdout_accuracy": 0.8}}
    assert gate_summary.training_line(kept).endswith(
        "; kernel head on 480 train examples, held-out 0.8500 vs the softmax's 0.8000")
    dropped = {**early, "kernel_head": {"kept": False, "why": "the softmax head was better on the held-out part",
                                        "holdout_accuracy": 0.7, "softmax_holdout_accuracy": 0.8}}
    assert gate_summary.training_line(dropped).endswith(
        "(kernel head not kept: the softmax head was better on the held-out part, held-out 0.7000 vs the "
        "softmax's 0.8000)")
    fixed = {"regime": "fixed_steps", "steps": 2316, "epochs_run": 6,
             "why": "no early stopping: --epochs or --train-steps set the length"}
    assert gate_summary.training_line(fixed) == (
        "Training: 2316 fixed steps over 6 epochs (no early stopping: --epochs or --train-steps set the length)")
    # A model exported before the regime was recorded prints no line rather than "None fixed steps".
    assert gate_summary.training_line({"hparams": {}, "learning_rate": 0.003}) is None


def test_gate_outcome_weighs_the_interval_of_the_eval_set(tmp_path):
    gate = {"threshold": 0.39, "floor": 0.36, "references": {"bigram": 0.38}, "gate_reference": "bigram",
            "margin": 0.01, "reference_threshold": 0.39}
    [small] = gate_summary.gate_lines(gate, 0.37, "Top-5 next-word accuracy", count=300)
    # By hand: centre (0.37 + z²/600) / (1 + z²/300) = 0.37164, half-width 0.05431.
    assert small.endswith("-> NOT ENOUGH EVIDENCE (0.3700, 95% interval 0.3173-0.4260 on 300 eval examples "
                          "contains the threshold)"), small
    [large] = gate_summary.gate_lines(gate, 0.37, "Top-5 next-word accuracy", count=100_000)
    assert large.endswith("-> FAILED (0.3700)")
    [close] = gate_summary.gate_lines(gate, 0.40, "Top-5 next-word accuracy", count=300)
    assert "passed (0.4000; within the noise of 300 eval examples" in close
    payload = {"references": {"bigram": 0.5}, "gate_reference": "bigram", "margin": 0.0, "eval_examples": 100}
    assert gate_summary.references_lines(payload, "Accuracy", 0.6) == [
        "Reference predictors (accuracy on the same eval split): bigram 0.5000 [95% CI 0.4038-0.5962]"]


def test_inconclusive_advice_names_the_data_needed(tmp_path):
    model_dir = _model_with_references(tmp_path, 0.61, margin=0.05)
    config = json_format.MessageToJson(eval_config(6, min_accuracy=0.2, max_regression=0.01))
    reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "evaluation"))
    [advice] = gate_summary.inconclusive_advice(0.63, 200, str(tmp_path / "evaluation"))
    assert advice.startswith("  - not enough evidence: 200 eval examples cannot tell 0.6300 from the threshold "
                             "0.6600 (about ")
    assert gate_summary.inconclusive_advice(0.50, 200, str(tmp_path / "evaluation")) == []  # clearly failed
    assert gate_summary.inconclusive_advice(0.70, 200, str(tmp_path / "evaluation")) == []  # passed


def test_the_text_training_line_shows_the_served_mix():
    text = {"regime": "early_stopping", "best_epoch": 2, "epochs_run": 4, "steps_per_epoch": 18,
            "stopped_early": True, "holdout_examples": 160,
            "blend": {"weights": {"network": 0.4, "kneser_ney": 0.48, "cache": 0.06, "unknown": 0.06},
                      "components": {"network": {"top5": 0.21}, "counts": {"top5": 0.25}}, "mix": {"top5": 0.28}}}
    assert gate_summary.training_line(text).endswith(
        "best on 160 held-out train examples), served mix of network and n-gram counts: network 0.40, "
        "kneser_ney 0.48, cache 0.06, unknown 0.06; held-out top-5 network 0.2100, counts 0.2500 -> mix 0.2800")
    # No network share: the reference's own count mix (its cache and unknown shares included) is served.
    text["blend"]["weights"] = {"network": 0.0, "kneser_ney": 0.8, "cache": 0.0, "unknown": 0.2}
    assert gate_summary.training_line(text).endswith(
        "-> mix 0.2800; the served model ranks as the Kneser-Ney reference itself: the network did not beat it "
        "beyond the noise of the held-out train windows, so it can tie the reference but not beat it")
    # generate's own mix (chosen by log-likelihood) is named where it differs from the served one.
    text["blend"]["weights"]["network"] = 0.5
    text["blend"]["generation_weights"] = {"network": 0.3, "kneser_ney": 0.56, "cache": 0.0, "unknown": 0.14}
    assert gate_summary.training_line(text).endswith(
        "-> mix 0.2800; generate draws with the network at 0.30, the share of the best held-out log-likelihood")
    text["blend"]["generation_weights"]["network"] = 0.5
    assert gate_summary.training_line(text).endswith("-> mix 0.2800")


@pytest.mark.parametrize("value,bound,shown", [
    (0.4952, 0.4148, "0.4952"),            # far apart: the usual four decimals
    (199_999 / 200_000, 1.0, "0.99999"),   # one error in 200,000 against a perfect reference
    (0.41479, 0.4148, "0.41479"),
    (1.0, 1.0, "1.0000"),                  # equal: nothing to tell apart
])
def test_a_value_is_shown_with_the_decimals_that_tell_it_from_its_bound(value, bound, shown):
    assert tfma_results.apart(value, bound) == shown


def test_the_trainer_fits_its_references_while_the_cnn_trains(trainer_digits, tmp_path, monkeypatch):
    """The CNN's run_fn fits the reference predictors beside the training, not before it (the
    references wait here until the training has begun), and still writes every reference, scored on
    the whole eval split, into the export for the gate."""
    import threading

    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.cnn import trainer
    from models.common.training import TrainingSettings

    training_started = threading.Event()
    fit_references, fit_with_holdout = trainer._references, trainer.regime.fit_with_holdout

    def references_after_training_began(*args):
        assert training_started.wait(timeout=300), "the references were fitted before the CNN began training"
        return fit_references(*args)

    def fit(*args, **kwargs):
        training_started.set()
        return fit_with_holdout(*args, **kwargs)

    monkeypatch.setattr(trainer, "_references", references_after_training_began)
    monkeypatch.setattr(trainer.regime, "fit_with_holdout", fit)
    serving = tmp_path / "serving"
    settings = TrainingSettings(batch_size=16)
    trainer.run_fn(FnArgs(**trainer_digits, transform_graph_path=trainer_digits["transform_output"],
                          serving_model_dir=str(serving), model_run_dir=str(tmp_path / "run"), train_steps=60,
                          eval_steps=2, custom_config={**settings.to_custom_config(), **DIGIT_FACTS}))
    written = references.read_references(str(serving))
    assert written is not None and written["gate_reference"] == "logistic_regression"
    assert set(written["references"]) == {"majority", "logistic_regression", "svm_rbf"}
    assert written["eval_examples"] == written["eval_split_examples"] == 60
    assert written["references"]["logistic_regression"] > written["references"]["majority"]

"""The reference gate's decision follows the evidence (issue 43).

Each case raises a real eval config with the gate (components/reference_gate.py), then lets TFMA's own
threshold check (``metrics_validator.validate_metrics``, what the Evaluator's blessing comes from) judge
the candidate's overall accuracy. Expected thresholds are worked out here by hand: the value whose 95%
Wilson interval on n examples starts at r is r + z * sqrt(r (1 - r) / n), the score test inverted.
"""
import math

from stackenv.tfma import tfma

import pytest
from google.protobuf import json_format
from tensorflow_model_analysis.evaluators import metrics_validator
from tensorflow_model_analysis.metrics import metric_specs

from components import reference_gate
from models.cnn.evaluation import ACCURACY, eval_config
from models.common import intervals, references
from pipeline.results import gate_summary

Z = 1.959963984540054


def _gate(tmp_path, reference, reference_examples, candidate_examples, margin=0.01, floor=0.0):
    """The gate.json and the raised config for a logistic reference scored on ``reference_examples``."""
    model_dir = str(tmp_path / "model")
    references.write_references(model_dir, ACCURACY, {"majority": 0.1, "logistic_regression": reference},
                                "logistic_regression", margin, extra={"eval_examples": reference_examples})
    config = json_format.MessageToJson(eval_config(10, min_accuracy=floor, max_regression=0.01))
    raised = reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "evaluation"), candidate_examples)
    return reference_gate.read_gate(str(tmp_path / "evaluation")), json_format.Parse(raised, tfma.EvalConfig())


def _tfma_blesses(config, accuracy):
    """TFMA's verdict on the overall slice for a candidate scoring ``accuracy``, as good as the served model."""
    thresholds = metric_specs.metric_thresholds_from_metrics_specs(config.metrics_specs, eval_config=config)
    metrics = {key: 0.0 if key.is_diff else accuracy for key in thresholds}
    return metrics_validator.validate_metrics(((), metrics), config).validation_ok


def test_the_100k_digit_run_is_blessed(tmp_path):
    """Issue 43's run: logistic 0.9935 on a 10,000-example subsample of 20,132 eval examples, CNN 0.9995.
    The old gate asked for min(0.9935 + 0.01, 1.0) = 1.0 and refused it."""
    gate, config = _gate(tmp_path, 0.9935, 10_000, 20_132)
    clears = 0.9935 + Z * math.sqrt(0.9935 * 0.0065 / 20_132)  # = 0.994610: its interval starts at 0.9935
    assert gate["threshold"] == pytest.approx(clears, abs=1e-7)
    assert gate["threshold"] < 0.9935 + 0.0065 / 2  # below the share of the error too (0.99675)
    assert _tfma_blesses(config, 0.9995)
    assert intervals.outcome(0.9995, 20_132, gate["threshold"]) == intervals.PASSED
    [line, rule] = gate_summary.gate_lines(gate, 0.9995, "Accuracy", 20_132)
    assert line == ("Gate: accuracy >= 0.9947 (logistic_regression 0.9935 on 10,000 of the 20,132 eval examples: "
                    "the lowest accuracy whose 95% interval on 20,132 eval examples lies above it; floor 0.0) "
                    "-> passed (0.9995)")
    assert rule == "  Rule: " + references.gate_rule(0.01)


@pytest.mark.parametrize("candidate", [0.9900, 0.9930])
def test_a_candidate_below_the_reference_is_not_blessed(tmp_path, candidate):
    gate, config = _gate(tmp_path, 0.9935, 10_000, 20_132)
    assert not _tfma_blesses(config, candidate)
    # 0.99 on 20,132: its interval (0.9885-0.9913) lies below the reference: refused outright.
    if candidate == 0.9900:
        assert intervals.outcome(candidate, 20_132, gate["threshold"]) == intervals.FAILED


def test_a_candidate_whose_interval_lies_above_the_reference_is_never_refused(tmp_path):
    """Wherever the margin or the share of the error would ask for more, a score whose interval clears the
    reference is enough: 0.62 on 100,000 examples (interval 0.6170-0.6230) beats a 0.61 reference."""
    gate, config = _gate(tmp_path, 0.61, 100_000, 100_000, margin=0.05)
    assert intervals.wilson(0.62, 100_000)[0] > 0.61
    assert _tfma_blesses(config, 0.62)
    # On 300 examples the same 0.62 proves nothing: the margin stands (0.61 + 0.05).
    small, small_config = _gate(tmp_path / "small", 0.61, 300, 300, margin=0.05)
    assert small["threshold"] == pytest.approx(0.66) and not _tfma_blesses(small_config, 0.62)
    assert gate_summary.gate_lines(small, 0.62, "Accuracy", 300)[0].startswith(
        "Gate: accuracy >= 0.6600 (logistic_regression 0.6100 + margin 0.0500; floor 0.0)")


def test_near_the_ceiling_the_demand_is_half_the_reference_error(tmp_path):
    """0.99 on 400 examples: + 0.005 (half its error), not + 0.01 (the margin, a perfect score)."""
    gate, config = _gate(tmp_path, 0.99, 400, 400)
    assert gate["threshold"] == pytest.approx(0.995)
    assert _tfma_blesses(config, 0.995) and not _tfma_blesses(config, 0.9925)
    assert gate_summary.gate_lines(gate, None, "Accuracy")[0] == (
        "Gate: accuracy >= 0.9950 (logistic_regression 0.9900 + 0.0050, 50% of its error, less than the margin "
        "0.0100; floor 0.0)")


def test_a_perfect_reference_on_the_same_examples_needs_a_tie(tmp_path):
    """1.0 on the 300 examples the model is scored on: it counts as one error (299/300), the demand is
    half an error above that, 1 - 1/600, which only 300/300 reaches; one error is not enough evidence."""
    gate, config = _gate(tmp_path, 1.0, 300, 300)
    assert gate["threshold"] == pytest.approx(1 - 1 / 600) and gate["threshold"] < 1.0
    assert _tfma_blesses(config, 1.0)
    assert not _tfma_blesses(config, 299 / 300)
    assert intervals.outcome(299 / 300, 300, gate["threshold"]) == intervals.INCONCLUSIVE
    assert not _tfma_blesses(config, 0.98)
    assert gate_summary.gate_lines(gate, 1.0, "Accuracy", 300)[0].startswith(
        "Gate: accuracy >= 0.9984 (logistic_regression 1.0000, counted as one error on 300: 0.9967 + 0.0017, "
        "50% of its error, less than the margin 0.0100; floor 0.0) -> passed (1.0000")


def test_a_perfect_reference_on_a_subsample_does_not_ask_200k_examples_for_a_perfect_score(tmp_path):
    """The 1M-image run: logistic 1.0 on 10,000 examples, the CNN scored on 200,525. Counted as one error on
    10,000 (0.9999), the demand is the score whose interval on 200,525 clears 0.9999: about 11 errors."""
    gate, config = _gate(tmp_path, 1.0, 10_000, 200_525)
    clears = 0.9999 + Z * math.sqrt(0.9999 * 0.0001 / 200_525)  # 0.99994377
    assert gate["threshold"] == pytest.approx(clears, abs=1e-8)
    assert _tfma_blesses(config, 1 - 10 / 200_525)
    assert not _tfma_blesses(config, 1 - 100 / 200_525)  # 0.9995: its interval lies below 0.9999
    assert intervals.outcome(1 - 100 / 200_525, 200_525, gate["threshold"]) == intervals.FAILED
    assert "logistic_regression 1.0000 on 10,000 of the 200,525 eval examples, counted as one error on 10,000: " \
           "0.9999: the lowest accuracy whose 95% interval" in gate_summary.gate_lines(gate, None, "Accuracy")[0]
    # The bar reads 0.99995 (rounded up), never 1.0000.
    assert gate_summary.gate_lines(gate, None, "Accuracy")[0].startswith("Gate: accuracy >= 0.99995 (")


def test_without_counts_the_rule_still_holds_on_the_point_values(tmp_path):
    """A references.json from before counts were recorded: no interval bar; a perfect reference of
    unknown size is taken at its word (a tie is all that can pass, as before)."""
    gate, config = _gate(tmp_path, 1.0, None, None)
    assert gate["threshold"] == 1.0 and _tfma_blesses(config, 1.0) and not _tfma_blesses(config, 0.9999)


def test_a_higher_floor_still_wins(tmp_path):
    gate, config = _gate(tmp_path, 0.9935, 10_000, 20_132, floor=0.9990)
    assert gate["threshold"] == pytest.approx(0.999) and not _tfma_blesses(config, 0.9985)
    assert "(the floor --min-accuracy; logistic_regression asks for 0.9947; floor 0.999)" in \
        gate_summary.gate_lines(gate, 0.9985, "Accuracy")[0]


@pytest.mark.parametrize("reference", [0.0, 0.3, 0.9, 0.99, 0.999, 0.9999, 1.0])
@pytest.mark.parametrize("examples", [(50, 50), (300, 300), (10_000, 20_132), (10_000, 200_525)])
def test_the_demand_is_never_perfect_unless_a_count_is_unknown_and_never_below_a_reference_short_of_perfect(
        reference, examples):
    reference = round(reference * examples[0]) / examples[0]  # a score on n examples is k / n
    wanted = references.demand(reference, 0.01, *examples)
    assert wanted.threshold < 1.0
    if reference < 1.0:
        assert wanted.threshold > reference  # a candidate below the reference is never blessed
    # A candidate whose 95% interval lies above the (counted) reference is never refused.
    count = examples[1]
    near = int(wanted.threshold * count)
    for k in range(count + 1) if count <= 300 else range(max(0, near - 50), min(count, near + 50) + 1):
        value = k / count
        if intervals.wilson(value, examples[1])[0] > wanted.counted + 1e-12:
            assert value >= wanted.threshold, (value, wanted)

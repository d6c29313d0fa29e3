"""A model that contains a reference is judged against the references it does not contain.

The text family serves its Kneser-Ney reference with the network mixed on top: asking it to beat that
reference by a margin could never pass where the network earns no share (one short document), so the gate
asks for at least the contained reference's hits on the same eval windows, and the margin over the others.
Each case raises the text family's real eval config and lets TFMA's own threshold check judge a score;
the thresholds expected are worked out by hand from hit counts.
"""
from stackenv.tfma import tfma

import pytest
from google.protobuf import json_format
from tensorflow_model_analysis.evaluators import metrics_validator
from tensorflow_model_analysis.metrics import metric_specs

from components import reference_gate
from models.common import references
from models.seq2seq.evaluation import GATE_METRIC, eval_config
from pipeline.results import gate_summary

WINDOWS = 532   # GPL-3's eval windows with the defaults: Kneser-Ney hit 253 of them (0.4756)


def _gate(tmp_path, scores, contained=("kneser_ney",), margin=0.01, floor=0.0, examples=WINDOWS, paired=None):
    model_dir = str(tmp_path / "model")
    extra = {"eval_examples": examples, "eval_split_examples": examples, **({"paired": paired} if paired else {})}
    references.write_references(model_dir, GATE_METRIC, scores, max(scores, key=scores.__getitem__), margin,
                                extra=extra, contained=contained)
    config = json_format.MessageToJson(eval_config(floor, max_regression=0.01))
    raised = reference_gate.apply_reference_gate(config, model_dir, str(tmp_path / "evaluation"), examples)
    return reference_gate.read_gate(str(tmp_path / "evaluation")), json_format.Parse(raised, tfma.EvalConfig())


def _tfma_blesses(config, value):
    thresholds = metric_specs.metric_thresholds_from_metrics_specs(config.metrics_specs, eval_config=config)
    metrics = {key: 0.0 if key.is_diff else value for key in thresholds if key.name == GATE_METRIC}
    return metrics_validator.validate_metrics(((), metrics), config).validation_ok


def test_a_model_equal_to_the_reference_it_contains_is_blessed(tmp_path):
    """GPL-3 alone with the defaults: the served model is its Kneser-Ney reference (network share 0), 253 of
    532 hits each. The old gate asked for 0.4756 + 0.01 and refused it; now the same hits pass, one fewer
    does not, and the bigram reference (not contained) still asks for its margin."""
    kneser_ney = 253 / WINDOWS
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.40, "kneser_ney": kneser_ney})
    assert gate["gate_reference"] == "kneser_ney" and gate["demand"]["why"] == references.BY_CONTAINED
    assert 252 / WINDOWS < gate["threshold"] < kneser_ney
    assert _tfma_blesses(config, 253 / WINDOWS)
    assert _tfma_blesses(config, 254 / WINDOWS)
    assert not _tfma_blesses(config, 252 / WINDOWS)
    [line, rule] = gate_summary.gate_lines(gate, kneser_ney, "Top-5 accuracy", WINDOWS)
    assert line == ("Gate: top-5 accuracy >= 0.4747 (kneser_ney 0.4756, which the model contains: at least its "
                    "hits on the same 532 eval examples; floor 0.0) -> passed (0.4756)")
    assert "plus the smaller of the margin 0.01" in rule and "reference it contains (kneser_ney)" in rule
    # One hit fewer than a part of itself on the same windows is a fact, not noise: FAILED, and no
    # --push-inconclusive advice.
    [line, _] = gate_summary.gate_lines(gate, 252 / WINDOWS, "Top-5 accuracy", WINDOWS)
    assert line.endswith("-> FAILED (0.4737)"), line
    assert gate_summary.inconclusive_advice(252 / WINDOWS, WINDOWS, str(tmp_path / "evaluation")) == []


def test_where_the_network_takes_a_share_the_paired_noise_is_allowed(tmp_path):
    """dpkg's triggers.txt alone: the network took a share on held-out train windows, and on the 457 eval
    windows the served model hit 4 fewer than its Kneser-Ney part (168 of 457). Where the two disagree on 25
    windows, McNemar's one-sided 5% bound allows 1.645 * sqrt(25) = 8.2 hits fewer: 4 fewer is blessed,
    9 fewer is not."""
    n = 457
    gate, config = _gate(tmp_path, {"unigram": 0.13, "bigram": 0.24, "kneser_ney": 168 / n}, examples=n,
                         paired={"kneser_ney": {"discordant": 25.0, "windows": n, "scored": n}})
    assert gate["demand"]["why"] == references.BY_CONTAINED
    assert gate["threshold"] == pytest.approx((168 - 1.645 * 5) / n)
    assert _tfma_blesses(config, 164 / n) and not _tfma_blesses(config, 159 / n)
    [line, _] = gate_summary.gate_lines(gate, 164 / n, "Top-5 accuracy", n)
    assert line == ("Gate: top-5 accuracy >= 0.3497 (kneser_ney 0.3676, which the model contains: at least its hits on "
                    "the same 457 eval examples, less the noise of the 25 where the two disagree; floor 0.0) -> passed "
                    "(0.3589)")


def test_a_reference_the_model_does_not_contain_still_asks_for_the_margin(tmp_path):
    """Where the bigram reference plus the margin is above the contained Kneser-Ney, it decides."""
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.47, "kneser_ney": 0.4756})
    assert gate["gate_reference"] == "bigram" and gate["demand"]["why"] == references.BY_MARGIN
    assert gate["threshold"] == pytest.approx(0.48)
    assert not _tfma_blesses(config, 0.4756)
    assert _tfma_blesses(config, 0.4801)


def test_a_negative_margin_lets_the_model_trail_the_reference_it_contains_too(tmp_path):
    """``--gate-margin -0.99`` (a Kubeflow run's runtime parameter in the contract test): no bar from any
    reference, so the floor decides; -0.05 lowers the contained demand by 0.05 and no more."""
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.40, "kneser_ney": 0.4756}, margin=-0.99, floor=0.05)
    assert gate["threshold"] == pytest.approx(0.05) and _tfma_blesses(config, 0.06)
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.40, "kneser_ney": 253 / WINDOWS}, margin=-0.05)
    assert gate["demand"]["why"] == references.BY_CONTAINED
    assert gate["threshold"] == pytest.approx((253 - 0.5) / WINDOWS - 0.05)
    [line, _] = gate_summary.gate_lines(gate, 0.43, "Top-5 accuracy", WINDOWS)
    assert "which the model contains: at least its hits on the same 532 eval examples, margin -0.0500;" in line


def test_the_floor_still_applies_over_a_contained_reference(tmp_path):
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.40, "kneser_ney": 0.4756}, floor=0.5)
    assert gate["threshold"] == pytest.approx(0.5)
    assert not _tfma_blesses(config, 0.4756)


def test_without_contained_references_the_gate_is_unchanged(tmp_path):
    """An image model holds none of its references: its gate reference plus the margin, as before."""
    gate, config = _gate(tmp_path, {"unigram": 0.20, "bigram": 0.40, "kneser_ney": 0.4756}, contained=())
    assert gate["gate_reference"] == "kneser_ney" and gate["demand"]["why"] == references.BY_MARGIN
    assert gate["threshold"] == pytest.approx(0.4856)
    assert not _tfma_blesses(config, 0.4756)
    assert gate["rule"] == references.gate_rule(0.01)


def test_a_contained_name_that_is_not_a_reference_is_refused(tmp_path):
    with pytest.raises(ValueError, match="contained references"):
        references.write_references(str(tmp_path), GATE_METRIC, {"bigram": 0.4}, "bigram", 0.01,
                                    contained=("kneser_ney",))

"""Wilson intervals and the gate's three outcomes, against values worked out by hand."""
import math

import pytest

from models.common import intervals


def test_wilson_matches_the_textbook_formula():
    # p = 0.5, n = 100: centre 0.5, half-width z*sqrt(0.0025 + z^2/40000)/(1 + z^2/100).
    z = 1.959963984540054
    half = z * math.sqrt(0.25 / 100 + z * z / 40000) / (1 + z * z / 100)
    low, high = intervals.wilson(0.5, 100)
    assert low == pytest.approx(0.5 - half) and high == pytest.approx(0.5 + half)
    assert (round(low, 3), round(high, 3)) == (0.404, 0.596)  # the published table value
    assert intervals.wilson(0.0, 10)[0] == 0.0 and intervals.wilson(1.0, 10)[1] == pytest.approx(1.0)
    assert intervals.wilson(0.3, 0) is None and intervals.wilson(float("nan"), 10) is None


def test_more_examples_narrow_the_interval():
    small, large = intervals.wilson(0.3, 50), intervals.wilson(0.3, 5000)
    assert large[1] - large[0] < (small[1] - small[0]) / 5


def test_three_outcomes():
    assert intervals.outcome(0.40, 300, 0.39) == intervals.PASSED
    assert intervals.outcome(0.37, 300, 0.39) == intervals.INCONCLUSIVE  # 300 windows cannot tell 0.02 apart
    assert intervals.outcome(0.37, 100_000, 0.39) == intervals.FAILED
    assert intervals.outcome(0.10, 300, 0.39) == intervals.FAILED
    assert intervals.text(0.5, 100) == " [95% CI 0.4038-0.5962]"
    assert intervals.text(0.5, None) == ""
    needed = intervals.examples_to_resolve(0.37, 0.39)
    assert intervals.outcome(0.37, needed, 0.39) == intervals.FAILED


def test_the_report_shows_each_reference_and_the_model_with_its_interval():
    from pipeline.report.page import _interval, references_frame

    extras = {"references": {"metric": "sparse_top_k_categorical_accuracy", "gate_reference": "bigram",
                             "references": {"unigram": 0.2, "bigram": 0.5}, "eval_examples": 100}}
    frame = references_frame(extras, 0.55, count=100)
    assert list(frame["model"]) == ["this model", "bigram", "unigram"]
    bigram = frame[frame["model"] == "bigram"].iloc[0]
    assert (round(bigram["95% CI low"], 4), round(bigram["95% CI high"], 4)) == (0.4038, 0.5962)
    assert frame["95% CI low"].notna().all()
    assert _interval({"accuracy": 0.5, "example_count": 100.0}, "accuracy")["low"] == pytest.approx(0.40383, abs=1e-4)
    assert _interval({"accuracy": 0.5}, "accuracy") is None


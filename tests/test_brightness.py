"""The brightness slice's rule (data/images/brightness.py), shared by the prepare step and the ExampleGen."""
from __future__ import annotations

import numpy as np
import pytest

from data.images import brightness


def _linear_quantile(values: list[float], q: float) -> float:
    """The textbook definition (linear interpolation between order statistics), written out."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def test_a_source_no_larger_than_the_sample_gets_its_exact_tertiles() -> None:
    rng = np.random.default_rng(3)
    means = rng.uniform(0, 255, size=brightness.SAMPLE_SIZE).tolist()
    units = [f"class/{i}.png" for i in range(len(means))]
    bounds = brightness.sample_thresholds(np.asarray(means), units)
    assert bounds == pytest.approx([_linear_quantile(means, 1 / 3), _linear_quantile(means, 2 / 3)], abs=1e-9)


def test_a_larger_source_is_sliced_by_its_first_ranked_images_whatever_the_listing_order(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(brightness, "SAMPLE_SIZE", 30)
    units = [f"u{i}" for i in range(100)]
    ranked = sorted(units, key=brightness.unit_rank)
    in_sample = set(ranked[:30])
    # Sampled images are dark (0..29), the others all white: only the sample decides.
    dark = iter(range(30))
    means = [float(next(dark)) if unit in in_sample else 255.0 for unit in units]
    bounds = brightness.sample_thresholds(np.asarray(means), units)
    assert bounds == pytest.approx([_linear_quantile(list(range(30)), 1 / 3), _linear_quantile(list(range(30)), 2 / 3)])
    backwards = brightness.sample_thresholds(np.asarray(means[::-1]), units[::-1])
    assert backwards == bounds


def test_within_a_unit_the_first_stored_images_are_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    # A CIFAR batch or TFRecord file: its images in stored order, the sample cut after 6.
    monkeypatch.setattr(brightness, "SAMPLE_SIZE", 6)
    means = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 250.0, 250.0, 250.0]
    bounds = brightness.sample_thresholds(np.asarray(means), ["batch"] * len(means))
    assert bounds == pytest.approx([_linear_quantile(means[:6], 1 / 3), _linear_quantile(means[:6], 2 / 3)])


def test_the_rank_is_seeded_not_the_listing_order() -> None:
    names = [f"cat/{i:03d}.png" for i in range(50)]
    ranked = sorted(names, key=brightness.unit_rank)
    assert ranked != names and sorted(names, key=brightness.unit_rank) == ranked


def test_bounds_are_inclusive_on_the_dark_side() -> None:
    assert [brightness.bucket(m, [10.0, 20.0]) for m in (10.0, 10.5, 20.0, 20.5)] == [
        "dark", "medium", "medium", "bright"]

"""How sure an accuracy is, given how many examples it was measured on.

Accuracy, top-5 accuracy and a reference predictor's hit rate are proportions of eval
examples, so their 95% interval is the Wilson score interval (Wilson 1927; Brown, Cai and
DasGupta 2001 recommend it over the normal approximation, which fails near 0 and 1 and on
small sets). It treats the examples as independent draws, as a bootstrap over examples
would; overlapping text windows are not fully independent, so read it as a lower bound on
the uncertainty.

The gate's three outcomes follow from it: a value at or above the threshold passes; one
whose whole interval lies below it fails; in between, the eval set is too small to tell the
model from the threshold: "not enough evidence".
"""
import math

Z95 = 1.959963984540054
PASSED, FAILED, INCONCLUSIVE = "passed", "failed", "not enough evidence"


def wilson(value: float, count: float, z: float = Z95) -> tuple[float, float] | None:
    """(low, high) 95% interval of a proportion ``value`` measured on ``count`` examples; None if unknown."""
    if count is None or not count or count < 1 or value is None or not math.isfinite(value) or not 0 <= value <= 1:
        return None
    n = float(count)
    centre = (value + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(value * (1 - value) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def text(value: float, count: float | None) -> str:
    """' [95% CI 0.2375-0.3355]' or '' when the count is unknown."""
    bounds = wilson(value, count) if count else None
    return f" [95% CI {bounds[0]:.4f}-{bounds[1]:.4f}]" if bounds else ""


def outcome(value: float, count: float | None, threshold: float) -> str:
    """PASSED, FAILED or INCONCLUSIVE for ``value`` against ``threshold`` (see the module docstring)."""
    if value >= threshold:
        return PASSED
    bounds = wilson(value, count) if count else None
    if bounds is not None and bounds[1] >= threshold:
        return INCONCLUSIVE
    return FAILED


def examples_to_resolve(value: float, threshold: float, z: float = Z95) -> int | None:
    """About how many eval examples would make a gap ``|value - threshold|`` clear of the noise."""
    gap = abs(value - threshold)
    if gap <= 0 or not 0 < value < 1:
        return None
    count = int(math.ceil(z * z * value * (1 - value) / (gap * gap)))  # the normal approximation's
    while not (wilson(value, count) or (0, 1))[0] > threshold and not (wilson(value, count) or (0, 1))[1] < threshold:
        count = int(math.ceil(count * 1.1))  # Wilson's interval is a little wider off the centre
    return count

"""TFMA pieces shared by the model families' eval configs."""
from stackenv.tfma import tfma


def overall_gate(min_value: float, max_regression: float) -> list:
    """The blessing gate, on the overall slice only (per-slice values are reported, not gated).

    Value threshold: the metric must reach ``min_value``. Change threshold: at most
    ``max_regression`` (absolute) below the baseline, the served model.
    """
    threshold = tfma.MetricThreshold(
        value_threshold=tfma.GenericValueThreshold(lower_bound={"value": min_value}),
        change_threshold=tfma.GenericChangeThreshold(
            direction=tfma.MetricDirection.HIGHER_IS_BETTER,
            absolute={"value": -max_regression}),
    )
    return [tfma.PerSliceMetricThreshold(slicing_specs=[tfma.SlicingSpec()], threshold=threshold)]

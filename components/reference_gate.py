"""The blessing floor that adapts to the data: the candidate must beat its own references.

A fixed ``--min-accuracy`` means nothing on data it was not tuned for (0.9 is easy on the
digits and out of reach on small icon sets, where always answering the largest class
scores 0.39). The Trainer writes ``assets.extra/references.json`` into the model
(models/common/references.py); before TFMA runs, the Evaluator raises the key metric's
value threshold on the overall slice to ``max(floor, demand)``, where the demand is the gate
reference plus the smaller of the margin and a share of the reference's error, lowered to the
score whose 95% interval on the eval examples clears the reference when that is lower
(``references.demand``; ``references.gate_rule`` says it in one sentence). TFMA's thresholds are
points, so the eval example count comes from the ExampleGen's facts (else the references' own
count). The decision is recorded as ``gate.json`` in the evaluation artifact, for the summary,
the report, the model card and the Pusher. A model without references.json is gated by the
floor alone, as before.
"""
import json
import logging
import math
import os
import re
from typing import Any

from stackenv.tfma import tfma

import tensorflow as tf
from google.protobuf import json_format

from models.common import references

GATE_FILE = "gate.json"

log = logging.getLogger(__name__)


def metric_name(config: tfma.MetricConfig) -> str:
    """The TFMA metric name of a MetricConfig: the name of the metric TFMA builds from it
    (a family's own metric may be named after the Keras metric it replaces), else its
    ``name`` setting, else TFMA's default (the class name in snake case)."""
    from tensorflow_model_analysis.metrics import metric_specs

    try:
        return str(metric_specs.metric_instance(config).name)
    except (AttributeError, ImportError, KeyError, NotImplementedError, TypeError, ValueError):
        pass  # a class TFMA cannot build here: named from the config alone
    if config.config:
        try:
            name = json.loads(config.config if config.config.startswith("{") else "{" + config.config + "}")
            if isinstance(name, dict) and name.get("name"):
                return str(name["name"])
        except ValueError:
            pass
    return re.sub(r"(?<!^)(?=[A-Z])", "_", config.class_name).lower()


def apply_reference_gate(eval_config_json: str, candidate_dir: str,
                         evaluation_uri: str | None, candidate_examples: int | None = None) -> str:
    """``eval_config_json`` with the key metric's lower bound raised to the reference gate.

    Args:
      eval_config_json: the TFMA EvalConfig as JSON.
      candidate_dir: the candidate's SavedModel (its ``assets.extra/references.json``).
      evaluation_uri: where ``gate.json`` goes (floor, references, margin, the bound used and why).
      candidate_examples: how many eval examples TFMA will score the candidate on, if known.

    Returns the config unchanged when the model has no references.
    """
    payload = references.read_references(candidate_dir)
    eval_config = json_format.Parse(eval_config_json, tfma.EvalConfig())
    metric = (payload or {}).get("metric")
    record: dict[str, Any] = {"metric": metric, "references": None, "floor": None, "threshold": None}
    for spec in eval_config.metrics_specs:
        for config in spec.metrics:
            if metric and metric_name(config) != metric:
                continue
            for per_slice in config.per_slice_thresholds:
                if not any(s == tfma.SlicingSpec() for s in per_slice.slicing_specs):
                    continue
                bound = per_slice.threshold.value_threshold.lower_bound
                floor = bound.value if per_slice.threshold.HasField("value_threshold") else 0.0
                record.update(metric=metric_name(config), floor=floor, threshold=floor)
                if payload:
                    wanted = references.gate_demand(payload, candidate_examples)
                    assert wanted is not None  # None only without a payload
                    margin = float(payload.get("margin", 0.0))
                    contained = list(payload.get("contained") or ())
                    record.update(references=payload["references"], paired=payload.get("paired") or {},
                                  gate_reference=wanted.name or payload["gate_reference"], contained=contained,
                                  margin=margin, reference_threshold=wanted.threshold, demand=wanted.to_dict(),
                                  rule=references.gate_rule(margin, contained), threshold=max(floor, wanted.threshold))
                    bound.value = record["threshold"]
    if payload is None:
        log.info("The candidate has no %s: gating on the floor alone.", references.REFERENCES_FILE)
    elif record["threshold"] is not None:
        log.info("Gate on %s: >= %.6f (floor %.4f; %s %.4f, margin %.4f, set by the %s)", record["metric"],
                 record["threshold"], record["floor"], record["gate_reference"],
                 payload["references"][record["gate_reference"]], record["margin"], record["demand"]["why"])
    if evaluation_uri:
        tf.io.gfile.makedirs(evaluation_uri)
        with tf.io.gfile.GFile(os.path.join(evaluation_uri, GATE_FILE), "w") as f:
            f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    return json_format.MessageToJson(eval_config) if payload else eval_config_json


def read_gate(evaluation_uri: str | None) -> dict[str, Any] | None:
    """The ``gate.json`` an Evaluator wrote, or None (older runs)."""
    path = os.path.join(evaluation_uri or "", GATE_FILE)
    if not evaluation_uri or not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as f:
        return json.loads(f.read())


def set_by_reference(gate: dict[str, Any]) -> bool:
    """The references set the gate's threshold, not the floor (``--min-accuracy``)."""
    return gate["threshold"] <= gate["reference_threshold"] + 1e-12


def noise_free(gate: dict[str, Any] | None) -> bool:
    """The deciding reference is a part of the model, scored on the same eval examples: fewer hits than it is
    a fact about these examples, not noise to weigh with an interval (no NOT ENOUGH EVIDENCE, no
    --push-inconclusive). Not where the floor decides: that one is a point."""
    if not gate or (gate.get("demand") or {}).get("why") != references.BY_CONTAINED:
        return False
    return set_by_reference(gate)


def bound_text(value: float) -> str:
    """A threshold rounded UP to 4 decimals, so a score shown below it is below it; more decimals where 4
    would read as the metric's maximum (0.99995, not 1.0000: the gate never asks for a perfect score
    unless it does)."""
    for places in range(4, 9):
        scale = 10 ** places
        shown = math.ceil(value * scale - 1e-6) / scale
        if shown < references.METRIC_MAXIMUM or value >= references.METRIC_MAXIMUM:
            return f"{shown:.{places}f}"
    return f"{value:.8f}"


def _amount(value: float) -> str:
    """A small difference: 4 decimals, or two significant digits below 0.001."""
    return f"{value:.4f}" if abs(value) >= 1e-3 else f"{value:.2g}"


def demand_text(gate: dict[str, Any], label: str) -> str:
    """How the reference set the threshold, with the numbers: 'logistic_regression 0.9708 + margin 0.0100'."""
    name = gate["gate_reference"]
    value = gate["references"][name]
    wanted = gate.get("demand") or {}  # a gate.json from before the rule: reference + margin
    counted, why = wanted.get("counted", value), wanted.get("why", references.BY_MARGIN)
    shown = f"{name} {value:.4f}"
    if wanted.get("reference_examples") and wanted.get("candidate_examples") and \
            wanted["reference_examples"] < wanted["candidate_examples"]:
        shown += f" on {wanted['reference_examples']:,} of the {wanted['candidate_examples']:,} eval examples"
    if counted < value:
        shown += f", counted as one error on {wanted['reference_examples']:,}: {bound_text(counted)}"
    if why == references.BY_CONTAINED:
        if not wanted.get("reference_examples"):
            return f"{name} {value:.4f}, which the model contains: at least its score"
        discordant = ((gate.get("paired") or {}).get(name) or {}).get("discordant")
        trail = min(float(gate.get("margin", 0.0)), 0.0)
        noise = (f", less the noise of the {discordant:,.0f} where the two disagree"
                 if discordant and wanted["threshold"] < value - 0.5 / wanted["reference_examples"] + trail - 1e-12
                 else "")
        return (f"{name} {value:.4f}, which the model contains: at least its hits on the same "
                f"{wanted['reference_examples']:,} eval examples{noise}" + (f", margin {trail:.4f}" if trail else ""))
    if why == references.BY_INTERVAL:
        return (f"{shown}: the lowest {label.lower()} whose 95% interval on {wanted['candidate_examples']:,} eval "
                "examples lies above it")
    if why == references.BY_SHARE:
        return (f"{shown} + {_amount(wanted['threshold'] - counted)}, {references.ERROR_SHARE:.0%} of its error, "
                f"less than the margin {gate['margin']:.4f}")
    return f"{shown} + margin {gate['margin']:.4f}"

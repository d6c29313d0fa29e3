"""The blessing floor that adapts to the data: the candidate must beat its own references.

A fixed ``--min-accuracy`` means nothing on data it was not tuned for (0.9 is easy on the
digits and out of reach on small icon sets, where always answering the largest class
scores 0.39). The Trainer writes ``assets.extra/references.json`` into the model
(models/common/references.py); before TFMA runs, the Evaluator raises the key metric's
value threshold on the overall slice to ``max(floor, gate reference + margin)`` and records
the decision as ``gate.json`` in its evaluation artifact, for the summary and the report.
A model without references.json is gated by the floor alone, as before.
"""
import json
import logging
import os
import re
from typing import Any

import tensorflow as tf
import tensorflow_model_analysis as tfma
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
                         evaluation_uri: str | None) -> str:
    """``eval_config_json`` with the key metric's lower bound raised to the reference gate.

    Writes ``gate.json`` (floor, references, margin, the bound used and why) into
    ``evaluation_uri``. Returns the config unchanged when the model has no references.
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
                    reference = references.gate_value(payload)
                    assert reference is not None  # None only without a payload
                    record.update(references=payload["references"], gate_reference=payload["gate_reference"],
                                  margin=float(payload.get("margin", 0.0)), reference_threshold=reference,
                                  threshold=max(floor, reference))
                    bound.value = record["threshold"]
    if payload is None:
        log.info("The candidate has no %s: gating on the floor alone.", references.REFERENCES_FILE)
    elif record["threshold"] is not None:
        log.info("Gate on %s: >= %.4f (floor %.4f; %s %.4f + margin %.4f)", record["metric"], record["threshold"],
                 record["floor"], record["gate_reference"], payload["references"][record["gate_reference"]],
                 record["margin"])
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

"""Summary lines about what a model had to beat: its reference predictors, the training
regime's choices (chosen epoch, class weights) and the reference gate's verdict.

Reads what the Trainer put in the model (``assets.extra/references.json``,
``assets.extra/training.json``) and what the Evaluator recorded (``gate.json``), so it works
for any family that writes them, and for a run served from cache.
"""
import json
import math
import os
from typing import Any

import tensorflow as tf

from artifacts import tfma_results
from components.reference_gate import bound_text, demand_text, noise_free, read_gate, set_by_reference
from models.common import intervals, references
from pipeline.results import advice

TRAINING_FILE = "training.json"


def read_model_extras(model_uri: str | None) -> dict[str, Any]:
    """``{"references": ..., "training": ...}`` from a Trainer's Model artifact (missing: absent)."""
    if not model_uri:
        return {}
    from tfx.utils import path_utils

    serving = path_utils.serving_model_path(model_uri)
    extras: dict[str, Any] = {}
    payload = references.read_references(serving)
    if payload:
        extras["references"] = payload
    path = os.path.join(serving, references.ASSETS_EXTRA, TRAINING_FILE)
    if tf.io.gfile.exists(path):
        with tf.io.gfile.GFile(path) as f:
            extras["training"] = json.loads(f.read())
    return extras


def training_line(training: dict[str, Any] | None) -> str | None:
    if not training:
        return None
    if training.get("regime") == "fixed_steps":
        why = training.get("why", "split streamed: no early stopping")
        return f"Training: {training.get('steps')} fixed steps over {training.get('epochs_run')} epochs ({why})"
    if training.get("regime") != "early_stopping":
        return None
    trials = {k: v for k, v in (training.get("class_weight_trials") or {}).items() if v is not None}
    weights = "with class weights" if training.get("class_weights") else "without class weights"
    if "class_weights" not in training:  # a family without classes (text)
        weights = _blend_clause(training.get("blend"))
    elif len(trials) > 1:
        weights += " (held-out accuracy " + ", ".join(
            f"{k.replace('_', ' ')} {v:.4f}" for k, v in sorted(trials.items())) + ")"
    stop = "stopped early" if training.get("stopped_early") else "ran to the step budget"
    if training.get("stopped_at_time_budget"):
        stop = f"stopped at the {training['time_budget_s'] // 60}-minute training budget"
    every = training["steps_per_epoch"]
    # A step or time budget may cut the last epoch.
    last = training.get("steps_run") or min(training["epochs_run"] * every, training.get("steps") or math.inf)
    return (f"Training: kept step {min(training['best_epoch'] * every, last)} of {last} "
            f"(checked every {every} steps; {stop}; best on {training['holdout_examples']} "
            f"held-out train examples), {weights}{_kernel_head_clause(training.get('kernel_head'))}")


def _blend_clause(mix: dict[str, Any] | None) -> str:
    """How the text model's served mix was chosen (models/seq2seq/blend.py), for the training line."""
    if not mix or not mix.get("weights"):
        return "network alone"
    weights = ", ".join(f"{name} {value:.2f}" for name, value in mix["weights"].items())
    parts = mix.get("components") or {}
    scores = ", ".join(f"{name} {value['top5']:.4f}" for name, value in parts.items())
    chosen = (mix.get("mix") or {}).get("top5")
    held = f"; held-out top-5 {scores} -> mix {chosen:.4f}" if scores and chosen is not None else ""
    alone = ("; the served model ranks as the Kneser-Ney reference itself: the network did not beat it beyond the "
             "noise of the held-out train windows, so it can tie the reference but not beat it"
             if not mix["weights"].get("network") else "")
    drawn = (mix.get("generation_weights") or {}).get("network")
    generation = (f"; generate draws with the network at {drawn:.2f}, the share of the best held-out log-likelihood"
                  if drawn is not None and drawn != mix["weights"].get("network") else "")
    return f"served mix of network and n-gram counts: {weights}{held}{alone}{generation}"


def _kernel_head_clause(head: dict[str, Any] | None) -> str:
    """How the CNN's kernel head (models/cnn/kernel_head.py) was decided, for the training line."""
    if not head or head.get("why") == "off":
        return ""
    compared = ""
    if head.get("holdout_accuracy") is not None and head.get("softmax_holdout_accuracy") is not None:
        compared = f", held-out {head['holdout_accuracy']:.4f} vs the softmax's {head['softmax_holdout_accuracy']:.4f}"
    if head.get("kept"):
        return f"; kernel head on {head['centers']} train examples{compared}"
    return f"; softmax head (kernel head not kept: {head.get('why')}{compared})"


def references_lines(payload: dict[str, Any] | None, label: str, overall: float | None = None,
                     count: float | None = None, training: dict[str, Any] | None = None) -> list[str]:
    """The reference predictors' scores, one line, and a warning when the model beats none of them.

    The one place the summary names the references (read from the model's references.json,
    so a cached run prints the same line); the gate may still pass with a negative margin.
    """
    if not payload or not payload.get("references"):
        return []
    ordered = sorted(payload["references"].items(), key=lambda item: item[1])  # weakest first
    count = payload.get("eval_examples") or count  # what the references were scored on
    values = ", ".join(f"{name} {value:.4f}{intervals.text(value, count)}" for name, value in ordered)
    out = [f"Reference predictors ({label.lower()} on the same eval split): {values}"]
    out += [f"  {name}: {text}" for name, text in sorted((payload.get("descriptions") or {}).items())]
    out += [f"  Not fitted, left out of the gate: {name} ({why})"
            for name, why in sorted((payload.get("not_fitted") or {}).items())]
    # A contained reference's paired comparison (models/seq2seq/trainer.py _disagreements): the gain itself.
    out += [f"  The served model over {name}, which it contains, on {pair['scored']:,} of the same eval windows: "
            f"{pair['gain']:+.4f} [95% CI {pair['gain_low']:+.4f}, {pair['gain_high']:+.4f}] (paired)"
            for name, pair in sorted((payload.get("paired") or {}).items()) if pair.get("gain") is not None]
    # A perfect score that ties a perfect reference has nothing left to gain from training longer.
    if overall is not None and overall <= ordered[-1][1] and overall < references.METRIC_MAXIMUM:
        remedy = advice.diagnosis(training) or ("the training record shows no clear cause: compare "
                                                "`tensorboard` curves, or add data")
        best, value = ordered[-1]
        if best in (payload.get("contained") or ()):  # a part of the model: served where the network adds nothing
            out.append(f"  The model ({overall:.4f}) does not beat {best} ({value:.4f}), which it contains: the "
                       f"network adds nothing to it here; {remedy}.")
        else:
            out.append(f"  WARNING: the model ({overall:.4f}) does not beat the best reference predictor "
                       f"({best} {value:.4f}); {remedy}.")
    return out


def gate_lines(gate: dict[str, Any] | None, overall: float | None, label: str,
               count: float | None = None) -> list[str]:
    """Which value check applied, with the numbers, and whether the model passed it (given the noise);
    then the gate's rule in one sentence."""
    if not gate or gate.get("threshold") is None:
        return []
    if noise_free(gate):
        count = None
    verdict = "" if overall is None else f" -> {outcome_words(overall, count, gate['threshold'])}"
    bound = bound_text(gate["threshold"])
    if gate.get("references"):
        name = gate["gate_reference"]
        source = (demand_text(gate, label) if set_by_reference(gate) else
                  f"the floor --min-accuracy; {name} asks for {bound_text(gate['reference_threshold'])}")
        rule = [f"  Rule: {gate['rule']}"] if gate.get("rule") else []
        return [f"Gate: {label.lower()} >= {bound} ({source}; floor {gate['floor']}){verdict}"] + rule
    return [f"Gate: {label.lower()} >= {bound} (the floor; the model has no references){verdict}"]


def outcome_words(overall: float, count: float | None, threshold: float) -> str:
    """'passed (0.41)', 'FAILED (0.30)', 'NOT ENOUGH EVIDENCE (...)': the value against the threshold and its noise."""
    verdict = intervals.outcome(overall, count, threshold)
    bounds = intervals.wilson(overall, count) if count else None
    if verdict == intervals.PASSED:
        close = (f"; within the noise of {count:.0f} eval examples, the interval reaches below it"
                 if bounds and bounds[0] < threshold else "")
        return f"passed ({overall:.4f}{close})"
    if verdict == intervals.FAILED:
        return f"FAILED ({tfma_results.apart(overall, threshold)})"
    low, high = bounds or (0.0, 1.0)  # INCONCLUSIVE implies an interval
    shown = [tfma_results.apart(value, threshold) for value in (overall, low, high)]
    return (f"NOT ENOUGH EVIDENCE ({shown[0]}, 95% interval {shown[1]}-{shown[2]} on "
            f"{count:.0f} eval examples contains the threshold)")


def inconclusive_advice(overall: float | None, count: float | None, evaluation_uri: str | None) -> list[str]:
    """What to do when the eval set cannot tell the model from the gate: more data, or push anyway."""
    gate = read_gate(evaluation_uri)
    if overall is None or not gate or gate.get("threshold") is None or noise_free(gate):
        return []
    if intervals.outcome(overall, count, gate["threshold"]) != intervals.INCONCLUSIVE:
        return []
    needed = intervals.examples_to_resolve(overall, gate["threshold"])
    more = f" (about {needed} eval examples would tell a gap this size from noise)" if needed else ""
    return [f"  - not enough evidence: {count:.0f} eval examples cannot tell {overall:.4f} from the threshold "
            f"{bound_text(gate['threshold'])}{more}. Add data so that the eval split grows, or run again with "
            "--push-inconclusive to push a model that may be no better than the reference."]


def remedy_lines(model_uri: str | None) -> list[str]:
    """For a model not blessed: what its training record says would help (pipeline/results/advice.py)."""
    remedy = advice.diagnosis(read_model_extras(model_uri).get("training"))
    return [f"  - what would help: {remedy}"] if remedy else []


def lines(model_uri: str | None, evaluation_uri: str | None, overall: float | None,
          label: str, count: float | None = None) -> list[str]:
    extras = read_model_extras(model_uri)
    training = training_line(extras.get("training"))
    return (references_lines(extras.get("references"), label, overall, count, extras.get("training"))
            + ([training] if training else [])
            + gate_lines(read_gate(evaluation_uri), overall, label, count))


def value_bound(evaluation_uri: str | None, floor: float) -> str:
    """The key metric's lower bound the Evaluator applied: the reference gate's, else the floor."""
    gate = read_gate(evaluation_uri)
    return bound_text(gate["threshold"]) if gate and gate.get("threshold") is not None else str(floor)


#: TFMA metrics that survive class imbalance (models/cnn/evaluation.py), with their labels.
IMBALANCE_METRICS = (("balanced_accuracy", "balanced accuracy"), ("macro_f1", "macro F1"))


def imbalance_text(evaluation_uri: str | None, slice_name: str) -> str:
    """'; balanced accuracy 0.81, macro F1 0.79' for a slice, or '' when not computed."""
    if not evaluation_uri:
        return ""
    from artifacts.tfma_results import slice_metrics

    parts = []
    for name, label in IMBALANCE_METRICS:
        value = next((m.value for m in slice_metrics(evaluation_uri, name) if m.slice_name == slice_name), None)
        if value is not None:
            parts.append(f"{label} {value:.4f}")
    return ("; " + ", ".join(parts)) if parts else ""

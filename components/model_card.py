"""A model card beside each pushed version: ``model_card.md`` and ``model_card.html``.

Why built here, from the run's own records: the Pusher has the model (its ``assets.extra``
records: training, references), the evaluation (TFMA metrics per slice, ``gate.json``), the
examples (their data facts: classes, split counts) and the family's declarations (intended
use, known limits: ``custom_config``), so the card is right for every run, on every runner,
and is published with the version or not at all. The TFX model card toolkit does not resolve
with this stack; the card is a list of blocks rendered twice, as Markdown and as HTML.
"""
from __future__ import annotations

import html
import json
import os
import re
import subprocess
from typing import Any

import tensorflow as tf

from artifacts.serving_dir import MODEL_CARD_FILES
from components.reference_gate import bound_text, demand_text, set_by_reference

Block = tuple  # ("h1"|"h2"|"p", text) | ("ul", [items]) | ("table", [headers], [[cells]])
MAX_SLICES = 40  # rows of the per-slice table, worst first


def _read_json(path: str) -> dict[str, Any]:
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def code_version() -> str:
    """The git commit of the project's code at push time, or why there is none (an installed image)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", root, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "not available (the code is not a git checkout)"
    return f"git {commit}" + (" with uncommitted changes" if dirty else "")


def _number(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _data_blocks(card: dict[str, Any], facts: dict[str, Any]) -> list[Block]:
    splits = facts.get("split_counts") or {}
    items = [f"Source: {card.get('data_source') or 'not recorded'}",
             f"Examples: {facts.get('num_examples', 'not recorded')}; splits: "
             + (", ".join(f"{name} {count}" for name, count in sorted(splits.items())) or "not recorded")]
    split = (facts.get("split") or {}).get("description")
    items.append(f"Split: {split}" if split else f"Split: {card.get('split_rule', 'not recorded')}")
    classes = facts.get("classes") or []
    if classes:
        shown = ", ".join(classes[:30]) + (f", ... ({len(classes)} in all)" if len(classes) > 30 else "")
        items.append(f"Classes ({len(classes)}): {shown}")
    if facts.get("image_shape"):
        items.append(f"Image shape (H, W, C): {tuple(facts['image_shape'])}")
    return [("h2", "Data"), ("ul", items)]


def _metric_blocks(card: dict[str, Any], evaluation_uri: str, references: dict[str, Any]) -> list[Block]:
    from artifacts.tfma_results import overall_metrics, slice_metrics

    # The family's declarations name the key metric; a Pusher run without them (an older compiled package)
    # still gets a card, from the key metric the model's references record.
    metric = card.get("gate_metric") or references.get("metric") or ""
    overall = overall_metrics(evaluation_uri)
    # TFMA also stores each metric's change against the baseline ("<name>_diff"): the card shows it once, below.
    rows = [[name, f"{value:.0f}" if name.endswith("count") else _number(value)]
            for name, value in sorted(overall.items()) if not name.endswith("_diff")]
    blocks: list[Block] = [("h2", "Metrics (eval split)"), ("table", ["metric", "value"], rows)]
    reference_values = references.get("references") or {}
    if reference_values:
        rows = [[name, _number(value), "gate reference" if name == references.get("gate_reference") else ""]
                for name, value in sorted(reference_values.items(), key=lambda item: item[1])]
        rows.append(["this model", _number(overall.get(metric)), ""])
        blocks += [("p", f"Reference predictors on the same eval split ({card['gate_metric_label']}):"),
                   ("table", ["predictor", metric, ""], rows)]
    slices = sorted((m for m in slice_metrics(evaluation_uri, metric) if m.slice_name != "overall"),
                    key=lambda m: m.value)
    if slices:
        blocks += [("p", f"{card['gate_metric_label']} per slice, worst first"
                         + (f" ({MAX_SLICES} of {len(slices)})" if len(slices) > MAX_SLICES else "") + ":"),
                   ("table", ["slice", metric, "examples"],
                    [[m.slice_name, _number(m.value), f"{m.count:.0f}" if m.count else ""]
                     for m in slices[:MAX_SLICES]])]
    baseline = next((m for m in slice_metrics(evaluation_uri, metric, "baseline") if m.slice_name == "overall"), None)
    blocks.append(("p", f"Served model before this one, on the same data: {baseline.value:.4f}" if baseline
                   else "No model was served before this one (no baseline comparison)."))
    return blocks


def _gate_blocks(card: dict[str, Any], evaluation_uri: str) -> list[Block]:
    from artifacts.tfma_results import overall_metrics

    gate = _read_json(os.path.join(evaluation_uri, "gate.json"))
    metric = card.get("gate_metric") or gate.get("metric") or ""
    value = overall_metrics(evaluation_uri).get(metric)
    label = str(card.get("gate_metric_label") or metric or "the key metric").lower()
    if gate.get("threshold") is None:
        check = f"{label} >= the floor {card.get('min_accuracy')}"
    elif gate.get("references"):
        source = (demand_text(gate, label) if set_by_reference(gate)
                  else f"the floor; {gate.get('gate_reference')} asks for {bound_text(gate['reference_threshold'])}")
        check = f"{label} >= {bound_text(gate['threshold'])} ({source}; floor {gate.get('floor')})"
    else:
        check = f"{label} >= {bound_text(gate['threshold'])} (the floor; the model has no references)"
    from artifacts.tfma_results import slice_metrics

    compared = any(m.slice_name == "overall" for m in slice_metrics(evaluation_uri, metric, "baseline")) \
        if metric else False
    against = (f", and is at most {card.get('max_regression')} below the served model" if compared
               else "; it was not compared with a served model (none was served, or it could not be evaluated)")
    blocks: list[Block] = [("h2", "Gate decision"),
                           ("p", f"Blessed and pushed: {label} {_number(value)} passed {check}{against}.")]
    if gate.get("rule"):
        blocks.append(("p", f"Rule: {gate['rule']}"))
    return blocks


def _training_blocks(card: dict[str, Any], training: dict[str, Any]) -> list[Block]:
    settings = dict(card.get("training") or {})
    settings.pop("family", None)
    items = [f"{name}: {value}" for name, value in sorted(settings.items()) if value not in ("", None)]
    for key in ("regime", "epochs_run", "best_epoch", "steps_per_epoch", "stopped_early", "stopped_at_time_budget",
                "steps_run", "class_weights"):
        if key in training:
            items.append(f"{key}: {training[key]}")
    if training.get("hparams"):
        items.append("hyperparameters: " + ", ".join(f"{k}={v}" for k, v in sorted(training["hparams"].items())))
    if training.get("tuned"):
        items.append("tuned: " + ", ".join(f"{k}={v}" for k, v in sorted(training["tuned"].items())))
    head = training.get("kernel_head") or {}
    if head:
        items.append(f"kernel head: {'kept' if head.get('kept') else 'not kept'} ({head.get('why')})")
    return [("h2", "Training"), ("ul", items)]


def _tflite_blocks(record: dict[str, Any]) -> list[Block]:
    from artifacts.serving_dir import tflite_file

    if "saved_model" not in record:
        return [("h2", "TFLite"), ("p", f"None: {record.get('why', 'not recorded')}.")]
    rows = [["SavedModel", f"{record['saved_model']['bytes']}", "", _number(record["saved_model"]["accuracy"])]]
    for name, entry in record.items():
        if isinstance(entry, dict) and name != "saved_model":
            rows.append([tflite_file(name) if entry.get("written") else f"{name}: not written ({entry.get('why')})",
                         str(entry.get("bytes", "")), _number(entry["agreement"]) if "agreement" in entry else "",
                         _number(entry["accuracy"]) if "accuracy" in entry else ""])
    return [("h2", "TFLite"), ("p", f"Checked against the SavedModel on {record['eval_examples']} eval examples "
                                    "(argmax agreement):"),
            ("table", ["model", "bytes", "agreement", "accuracy"], rows)]


def build_card(card: dict[str, Any], version: int, push_info: dict[str, Any], model_dir: str,
               evaluation_uri: str | None, facts: dict[str, Any] | None) -> list[Block]:
    """The card's blocks from the family's declarations (``card``), the run's artifacts and the data's
    facts (components/data_facts.py; None for data ingested by ImportExampleGen)."""
    extra = os.path.join(model_dir, "assets.extra")
    facts = facts or {}
    blocks: list[Block] = [
        ("h1", f"Model card: {card.get('model_name', card['family'])}, version {version}"),
        ("ul", [f"Model: {card['family']} ({card.get('description', '')})",
                f"Pushed: {push_info.get('pushed_at')} by pipeline {card.get('pipeline_name')}, "
                f"run {push_info.get('pipeline_run_id')}",
                f"Model artifact: {push_info.get('model_uri')}",
                f"Code: {code_version()}; model code hash {card.get('code_version', 'not recorded')}"]),
        ("h2", "Intended use"), ("p", card.get("intended_use") or "Not declared by the model family."),
    ]
    blocks += _data_blocks(card, facts)
    if evaluation_uri:
        blocks += _metric_blocks(card, evaluation_uri, _read_json(os.path.join(extra, "references.json")))
        blocks += _gate_blocks(card, evaluation_uri)
    blocks += _training_blocks(card, _read_json(os.path.join(extra, "training.json")))
    blocks += _tflite_blocks(push_info.get("tflite") or {})
    eval_count = (facts.get("split_counts") or {}).get("eval")
    limits = list(card.get("known_limits") or [])
    if eval_count:
        limits.append(f"Measured on {eval_count} eval examples from the same source as the training data: one "
                      f"example is {1 / eval_count:.2%} of accuracy, and data from elsewhere may score lower.")
    blocks += [("h2", "Known limits"), ("ul", limits or ["None declared."])]
    return blocks


#: Characters Markdown reads as markup inside a line (CommonMark's backslash escapes); ``<``, ``>`` and ``&``
#: become entities instead, since a renderer passes raw HTML (``<img onerror=...>``) through.
_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]|~])")


def markdown_text(value: Any) -> str:
    """``value`` as literal Markdown text: HTML's three special characters as entities, Markdown's inline markup
    backslash-escaped, line breaks as spaces (a class or file name cannot start a block), a leading block
    marker (``#``, ``-``, ``+``, ``=``, ``1.``) escaped."""
    text = " ".join(str(value).splitlines())
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    text = _MARKDOWN_PUNCTUATION.sub(r"\\\1", text)
    text = re.sub(r"^(\s*)([#+=-])", r"\1\\\2", text)  # a heading, a list item, a setext underline
    return re.sub(r"^(\s*\d+)([.)])(?=\s|$)", r"\1\\\2", text)  # an ordered list item ("1. x"), not "0.99"


def to_markdown(blocks: list[Block]) -> str:
    """Every string of every block written as literal text (``markdown_text``): a class name, a path or a
    hyperparameter value never becomes markup or HTML in a Markdown viewer."""
    lines: list[str] = []
    for kind, *content in blocks:
        if kind in ("h1", "h2"):
            lines += [("# " if kind == "h1" else "## ") + markdown_text(content[0]), ""]
        elif kind == "p":
            lines += [markdown_text(content[0]), ""]
        elif kind == "ul":
            lines += [f"- {markdown_text(item)}" for item in content[0]] + [""]
        elif kind == "table":
            headers, rows = content
            cells = lambda row: "| " + " | ".join(markdown_text(c) for c in row) + " |"  # noqa: E731
            lines += [cells(headers), "| " + " | ".join("---" for _ in headers) + " |", *map(cells, rows), ""]
    return "\n".join(lines)


def to_html(blocks: list[Block]) -> str:
    parts = []
    for kind, *content in blocks:
        if kind in ("h1", "h2", "p"):
            parts.append(f"<{kind}>{html.escape(content[0])}</{kind}>")
        elif kind == "ul":
            parts.append("<ul>" + "".join(f"<li>{html.escape(str(i))}</li>" for i in content[0]) + "</ul>")
        elif kind == "table":
            headers, rows = content
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
            body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
            parts.append(f"<table><tr>{head}</tr>{body}</table>")
    title = html.escape(blocks[0][1]) if blocks else "Model card"
    style = ("body{font-family:sans-serif;max-width:60em;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}")
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
            f"<style>{style}</style></head><body>{''.join(parts)}</body></html>\n")


def write_model_card(directory: str, blocks: list[Block]) -> None:
    markdown_name, html_name = MODEL_CARD_FILES
    for name, text in ((markdown_name, to_markdown(blocks)), (html_name, to_html(blocks))):
        with tf.io.gfile.GFile(os.path.join(directory, name), "w") as handle:
            handle.write(text)

"""The self-contained HTML report of an evaluation, and its metrics as JSON beside it.

One file with every figure embedded as a PNG data URI, so it opens in any browser, is
attached to CI runs as is, and requests nothing from the network.
"""
import base64
import datetime
import html
import json
import logging
import math
import os
import pathlib
from collections.abc import Sequence
from typing import Any

from stackenv import text_out

import numpy as np
import pandas as pd
import tensorflow as tf
from matplotlib.figure import Figure

from artifacts.serving_dir import MODEL_CARD_FILES
from artifacts.tfma_results import COUNT_METRIC
from pipeline.report.corpus import corpus_data
from pipeline.report.data_warnings import split_warnings
from pipeline.report.evaluations import Evaluation, ReportError, find_latest_evaluation
from pipeline.report.figures import figure_png, plot_slice_metric
from pipeline.report.pictures import family_pictures, family_samples
from pipeline.report.tables import comparison_frame, per_class_frame, slice_metrics_frame, worst_slices
from pipeline.report.validation import validation_frame, validation_summary

log = logging.getLogger(__name__)

_CSS = """
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 2em auto;
       max-width: 1100px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .8em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td.text, th.text { text-align: left; }
tr.worst td { background: #fde0dd; font-weight: bold; }
tr.this-model td { background: #deebf7; font-weight: bold; }
tr.failed td { background: #fde0dd; } tr.passed td { background: #e5f5e0; }
.badge { display: inline-block; padding: .2em .7em; border-radius: .8em; font-weight: bold; }
.blessed { background: #c7e9c0; } .not-blessed { background: #fcbba1; } .unknown { background: #ddd; }
.meta td { text-align: left; border: none; padding: .1em .8em .1em 0; }
img { max-width: 100%; display: block; margin: .5em 0; }
.note { color: #666; font-size: .9em; } .error { color: #a50f15; }
"""


def _img(figure: Figure, alt: str) -> str:
    data = base64.b64encode(figure_png(figure)).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def _cell(column: str, value: Any) -> str:
    """Booleans as yes/no, counts as integers, other numbers to 4 decimals."""
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (float, np.floating, int, np.integer)):
        return _metric_text(column, float(value))
    return html.escape(str(value))


def _metric_text(metric: str, value: float, signed: bool = False) -> str:
    """Counts as integers, other metrics to 4 decimals; diffs with their sign."""
    if math.isnan(value):
        return "n/a"
    decimals = 0 if metric.endswith(COUNT_METRIC) or metric == "class_id" else 4
    return f"{value:{'+' if signed else ''}.{decimals}f}"


def html_table(frame: pd.DataFrame, table_id: str, row_classes: Sequence[str] | None = None,
               text_columns: Sequence[str] | None = None) -> str:
    """A plain, escaped HTML table; text columns (default: non-numeric ones) left-aligned."""
    if text_columns is None:
        text_columns = [c for c in frame.columns if frame[c].dtype == object]
    align = {c: ' class="text"' if c in text_columns else "" for c in frame.columns}
    head = "".join(f"<th{align[c]}>{html.escape(str(c))}</th>" for c in frame.columns)
    body = []
    for position, (_, row) in enumerate(frame.iterrows()):
        css = f' class="{row_classes[position]}"' if row_classes and row_classes[position] else ""
        cells = "".join(f"<td{align[c]}>{_cell(c, row[c])}</td>" for c in frame.columns)
        body.append(f"<tr{css}>{cells}</tr>")
    return (f'<table id="{table_id}" class="metrics"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table>')


def _json_number(value: Any) -> Any:
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def report_data(evaluation: Evaluation, slices: pd.DataFrame, comparison: pd.DataFrame,
                validation: dict[str, Any], warnings: Sequence[str] = (),
                corpus: dict[str, Any] | None = None) -> dict[str, Any]:
    """What ``report.json`` holds: machine-readable metrics for CI and dashboards."""
    per_slice = {row["slice"]: {k: _json_number(v) for k, v in row.items() if k not in ("slice", "feature")}
                 for _, row in slices.iterrows()}
    return {
        "pipeline": evaluation.pipeline_name,
        "family": evaluation.family,
        "run": evaluation.run_name,
        "evaluation_uri": evaluation.uri,
        "model_uri": evaluation.model_uri,
        "key_metric": slices.attrs["key_metric"],
        "overall": per_slice.get("overall", {}),
        "overall_interval": _interval(per_slice.get("overall", {}), slices.attrs["key_metric"]),
        "slices": per_slice,
        "baseline": {row["metric"]: _json_number(row["baseline"]) for _, row in comparison.iterrows()} or None,
        "blessed": evaluation.blessed,
        "validation_failures": validation["failures"],
        "pushed_path": evaluation.pushed_path,
        "model_card": model_card_link(evaluation.pushed_path),
        "data_warnings": list(warnings),
        "corpus": corpus,  # text data: documents, words, files not used (pipeline/report/corpus.py)
    }


def _interval(overall: dict[str, Any], key: str) -> dict[str, Any] | None:
    """The key metric's 95% Wilson interval over the eval examples (models/common/intervals.py)."""
    from models.common import intervals

    value, count = overall.get(key), overall.get(COUNT_METRIC)
    bounds = intervals.wilson(value, count) if isinstance(value, float) and count else None
    if not bounds:
        return None
    return {"metric": key, "low": bounds[0], "high": bounds[1], "confidence": 0.95, "examples": count}


def _overall(slices: pd.DataFrame, key: str) -> float | None:
    if key not in slices.columns:
        return None
    values = slices.loc[slices["slice"] == "overall", key].dropna()
    return float(values.iloc[0]) if len(values) else None


def _section(title: str, body: str, section_id: str) -> str:
    return f'<section id="{section_id}"><h2>{html.escape(title)}</h2>{body}</section>'


def _header(evaluation: Evaluation) -> str:
    badge_class = {True: "blessed", False: "not-blessed", None: "unknown"}[evaluation.blessed]
    badge_text = {True: "blessed", False: "NOT blessed", None: "blessing unknown"}[evaluation.blessed]
    meta = [("Pipeline", evaluation.pipeline_name), ("Model family", evaluation.family),
            ("Run", evaluation.run_name or "?"), ("Evaluated", f"{evaluation.finished:%Y-%m-%d %H:%M:%S}"),
            ("Evaluation", evaluation.uri), ("Model", evaluation.model_uri or "?"),
            ("Pushed", evaluation.pushed_path or "not pushed")]
    rows = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(str(v))}</td></tr>" for k, v in meta)
    card = model_card_link(evaluation.pushed_path)
    if card:
        rows += (f'<tr><td><b>Model card</b></td><td><a id="model-card" href="{html.escape(card)}">'
                 f"{html.escape(card)}</a></td></tr>")
    return (f'<h1>Model evaluation: {html.escape(evaluation.pipeline_name)} '
            f'<span id="blessing" class="badge {badge_class}">{badge_text}</span></h1>'
            f'<table class="meta">{rows}</table>')


def model_card_link(pushed_path: str | None) -> str | None:
    """The pushed version's model_card.html (components/model_card.py) as a link target, if it has one."""
    if not pushed_path:
        return None
    path = os.path.join(pushed_path, MODEL_CARD_FILES[1])
    if not tf.io.gfile.exists(path):
        return None
    return pathlib.Path(path).as_uri() if "://" not in path else path


def _warnings_section(warnings: Sequence[str]) -> str:
    """Classes and slices the evaluation could not measure (the run summary's WARNING lines)."""
    if not warnings:
        return ""
    items = "".join(f"<li>{html.escape(w)}</li>" for w in warnings)
    note = '<p class="note">Read from the StatisticsGen output of the evaluated examples.</p>'
    return _section("Not evaluated", f'<ul class="error">{items}</ul>{note}', "data-warnings")


def _corpus_section(corpus: dict[str, Any] | None) -> str:
    """The text corpus the model was trained on, and every file that was not used."""
    if corpus is None:
        return ""
    from pipeline.report.corpus import skipped_frame

    body = f'<p id="corpus-line">{html.escape(corpus["line"])}</p>'
    if corpus.get("split"):
        body += f'<p class="note">Split: {html.escape(corpus["split"])}</p>'
    frame = skipped_frame(corpus)
    if not frame.empty:
        body += html_table(frame, "skipped-files", text_columns=list(frame.columns))
    return _section("Data", body, "data")


def _validation_section(validation: dict[str, Any], checks: pd.DataFrame) -> str:
    headline = {True: "Blessed: every threshold passed.", False: "NOT blessed. Failed:"}.get(
        validation["blessed"], validation["text"])
    body = f"<p>{html.escape(headline)}</p>"
    if validation["failures"]:
        body += '<ul class="error">' + "".join(f"<li>{html.escape(f)}</li>" for f in validation["failures"]) + "</ul>"
    if not checks.empty:
        classes = ["" if p is None else ("passed" if p else "failed") for p in checks["passed"]]
        body += html_table(checks, "validation", classes)
    return _section("Validation (the gate)", body, "validation-result")


def _comparison_section(comparison: pd.DataFrame) -> str:
    if comparison.empty:
        body = '<p class="note">No baseline: nothing was served when this model was evaluated.</p>'
    else:
        shown = comparison.copy()
        for column in ("candidate", "baseline", "diff"):
            shown[column] = [_metric_text(m, v, signed=column == "diff")
                             for m, v in zip(comparison["metric"], comparison[column])]
        body = html_table(shown, "baseline-comparison", text_columns=["metric"])
    return _section("Candidate vs baseline (overall)", body, "comparison")


def _pictures_html(evaluation: Evaluation) -> str:
    """Family pictures; one that fails is reported in its place, the rest still render."""
    try:
        figures = family_pictures(evaluation)
    except Exception as error:  # noqa: BLE001 - a report with a note beats no report
        log.warning("Family pictures failed: %s", error, exc_info=True)
        return f'<p class="error">Could not draw the {evaluation.family} pictures: {html.escape(str(error))}</p>'
    return "".join(f"<h3>{html.escape(title)}</h3>{_img(figure, title)}" for title, figure in figures.items())


def references_frame(extras: dict[str, Any], overall: float | None, count: float | None = None) -> pd.DataFrame:
    """This model's key metric next to its reference predictors' on the same eval split, best first,
    each with its 95% interval over the eval examples (models/common/intervals.py)."""
    from models.common import intervals

    payload = extras.get("references") or {}
    rows = [(name, float(value), name == payload.get("gate_reference"), payload.get("eval_examples") or count)
            for name, value in (payload.get("references") or {}).items()]
    if not rows:
        return pd.DataFrame()
    rows.append(("this model", float("nan") if overall is None else float(overall), False, count))
    bounds = [intervals.wilson(value, n) if n else None for _, value, _, n in rows]
    frame = pd.DataFrame([row[:3] for row in rows], columns=["model", payload.get("metric", "value"), "gate reference"])
    frame["95% CI low"] = [b[0] if b else float("nan") for b in bounds]
    frame["95% CI high"] = [b[1] if b else float("nan") for b in bounds]
    return frame.sort_values(frame.columns[1], ascending=False, na_position="last").reset_index(drop=True)


def _references_section(evaluation: Evaluation, overall: float | None, count: float | None = None) -> list[str]:
    """What the model had to beat (the Trainer's references.json) and how it was trained."""
    from pipeline.results import gate_summary

    extras = gate_summary.read_model_extras(evaluation.model_uri)
    frame = references_frame(extras, overall, count)
    if frame.empty:
        return []
    from models.common import references

    margin = float(extras["references"].get("margin", 0.0))
    rule = references.gate_rule(margin, extras["references"].get("contained") or ())
    note = ('<p class="note">Fitted by the Trainer on the same transformed train split and scored on this '
            "eval split (the model's assets.extra/references.json).</p>"
            f'<p id="gate-rule">{html.escape(rule)}</p>')
    training = gate_summary.training_line(extras.get("training"))
    body = note + html_table(frame, "references", ["this-model" if m == "this model" else "" for m in frame["model"]],
                             text_columns=["model"])
    if training:
        body += f'<p id="training-line">{html.escape(training)}</p>'
    return [_section("Reference predictors and training", body, "references-section")]


def _trials_section(output_dir: str | None, evaluation: Evaluation) -> list[str]:
    """The hyperparameter search behind the model (pipeline/report/trials.py), if there was one."""
    from pipeline.report.trials import SECTION_ID, section_parts

    parts = section_parts(output_dir, evaluation.model_uri) if output_dir else None
    if parts is None:
        return []
    note, frame, figure = parts
    body = f'<p class="note">{html.escape(note)}</p>' + html_table(frame, SECTION_ID) + _img(figure, "score by trial")
    return [_section("Hyperparameter search (trials)", body, SECTION_ID + "-section")]


def render_html(evaluation: Evaluation, output_dir: str | None = None,
                not_latest: str = "") -> tuple[str, dict[str, Any]]:
    """The report page and its JSON data (``output_dir``: for the search's trials section;
    ``not_latest``: why the shown run is not the latest attempt, shown first)."""
    slices = slice_metrics_frame(evaluation)
    key = slices.attrs["key_metric"]
    comparison = comparison_frame(evaluation)
    validation = validation_summary(evaluation)
    worst = worst_slices(slices)
    per_class = per_class_frame(evaluation)
    warnings = split_warnings(evaluation)
    corpus = corpus_data(evaluation)
    body = [
        _header(evaluation),
        _section("Not the latest attempt", f'<p class="error">{html.escape(not_latest)}</p>', "not-latest")
        if not_latest else "",
        _warnings_section(warnings),
        _corpus_section(corpus),
        _validation_section(validation, validation_frame(evaluation)),
        _comparison_section(comparison),
        *_references_section(evaluation, _overall(slices, key), _overall(slices, COUNT_METRIC)),
        _section(f"Metrics per slice (worst {key} first)",
                 html_table(slices, "slice-metrics", ["worst" if w else "" for w in worst])
                 + _img(plot_slice_metric(slices), f"{key} by slice"), "slices"),
    ]
    if not per_class.empty:
        note = ('<p class="note">TFMA\'s binarized per-class metrics: a class counts as predicted when '
                "its probability is at least 0.5, so recall can be below the accuracy of the class's "
                "label slice (which takes the most likely class).</p>")
        body.append(_section("Per class (overall)", note + html_table(per_class, "per-class"), "classes"))
    body.append(_section(f"Family pictures ({evaluation.family})", _pictures_html(evaluation), "pictures"))
    body.extend(_trials_section(output_dir, evaluation))
    family = evaluation.report_family
    if family.samples:
        try:
            samples = family_samples(evaluation)
            assert samples is not None  # None only for a family without samples
            samples = html_table(samples, "generations", text_columns=list(samples.columns))
        except Exception as error:  # noqa: BLE001 - a report with a note beats no report
            samples = f'<p class="error">Could not generate samples: {html.escape(str(error))}</p>'
        body.append(_section(family.samples_title, samples, "generations"))
    page = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Evaluation report: {html.escape(evaluation.pipeline_name)}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}"
            f'<p class="note">Generated {datetime.datetime.now():%Y-%m-%d %H:%M:%S} by pipeline/report/ '
            "from ML Metadata and the TFMA output.</p></body></html>\n")
    data = report_data(evaluation, slices, comparison, validation, warnings, corpus)
    data["not_latest"] = not_latest or None
    return page, data


def write_report(output_dir: str, to_path: str, pipeline_name: str | None = None) -> str:
    """Write the HTML report of the latest evaluation, and its metrics as JSON beside it.

    The JSON goes to ``to_path`` with a ``.json`` suffix (``report.html`` -> ``report.json``).
    Returns the HTML path.
    """
    to_path = os.path.abspath(to_path)
    if to_path.endswith(".json"):
        raise ReportError(f"{to_path}: the report is HTML (its JSON is written beside it); use a .html path.")
    from pipeline.report.runs import shown_run

    evaluation = find_latest_evaluation(output_dir, pipeline_name)
    run = shown_run(output_dir, pipeline_name)
    page, data = render_html(evaluation, output_dir, "" if run.is_latest else run.describe())
    os.makedirs(os.path.dirname(to_path), exist_ok=True)
    _write_atomically(to_path, page)
    _write_atomically(os.path.splitext(to_path)[0] + ".json", json.dumps(data, indent=2, allow_nan=False) + "\n")
    return to_path


def _write_atomically(path: str, text: str) -> None:
    """Write next to the target and rename, so a browser never sees half a report."""
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8", errors=text_out.ERRORS) as handle:
        handle.write(text)
    os.replace(temporary, path)

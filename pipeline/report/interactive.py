"""Interactive metric views (Plotly) that draw in JupyterLab 4 with no internet access.

TFMA 0.47's own views are a classic-notebook extension whose charts load Google Charts
from the internet (docs/guide/metrics.md); these figures show the same
data, read through the report's tables (``tables``, ``evaluations``), with plotly.js
from the installed wheel: its JupyterLab renderer (``jupyterlab-plotly``) or, in an HTML
file, the library inlined. Sorting and the metric picker are Plotly dropdowns, so they
work in the browser without a running kernel.

In a notebook (``show``) each figure is one output with two forms: Plotly's JSON, which
JupyterLab's renderer draws, and HTML for every other reader of the saved notebook
(nbconvert's HTML export, the classic notebook). Plotly's own "notebook" renderer put the
4.6 MB library into the notebook once per figure, and only for pages with require.js, so
the executed notebook was ~20 MB and blank in nbconvert's export. Here the first figure
shown in a kernel carries the library once, gzip-compressed (1.8 MB in base64), and
unpacks it with the browser's DecompressionStream into a global ``Plotly`` whether or
not require.js is on the page; the figures draw when it is ready. "Restart and run all"
keeps the library in the first figure's output.
"""
import base64
import gzip
import json
import math
import uuid
from collections.abc import Sequence
from functools import lru_cache

import pandas as pd
import plotly.graph_objects as go

from artifacts import tfma_results
from artifacts.tfma_results import COUNT_METRIC
from pipeline.report.evaluations import Evaluation
from pipeline.report.tables import comparison_frame, per_class_frame, slice_metrics_frame

CANDIDATE_COLOR, BASELINE_COLOR, WORST_COLOR = "#4c72b0", "#bbbbbb", "#d62728"
# Dropdowns sit between the title (top of the figure) and the plot, so neither hides the other.
_DROPDOWN = dict(x=0, xanchor="left", y=1.02, yanchor="bottom", showactive=True)
_TITLE = dict(x=0.5, y=0.98, yref="container", yanchor="top")


def _metric_columns(frame: pd.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in ("slice", "feature") and pd.api.types.is_numeric_dtype(frame[c])]


def _text(value) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:.4f}"
    return str(value)


def _columns_sorted(frame: pd.DataFrame, by: str, ascending: bool) -> list[list[str]]:
    ordered = frame.sort_values([by, "slice"], ascending=[ascending, True], na_position="last")
    return [[_text(v) if c != COUNT_METRIC else f"{v:.0f}" for v in ordered[c]] for c in frame.columns]


def slices_table(frame: pd.DataFrame, title: str | None = None) -> go.Figure:
    """Every slice and metric (``slice_metrics_frame``) as a table; the dropdown re-sorts it.

    The first order is the frame's own: worst slice by the key metric first.
    """
    key = frame.attrs.get("key_metric") or _metric_columns(frame)[0]
    metrics = _metric_columns(frame)
    figure = go.Figure(go.Table(
        header=dict(values=[f"<b>{c}</b>" for c in frame.columns], fill_color="#f3f3f3", align="left"),
        cells=dict(values=_columns_sorted(frame, key, frame.attrs.get("higher_is_better", True)), align="left"),
        columnwidth=[3, 1] + [1] * len(metrics)))
    buttons = []
    for metric in metrics:
        for ascending in (True, False):
            label = f"sort by {metric} {'↑' if ascending else '↓'}"
            buttons.append(dict(label=label, method="restyle",
                                args=[{"cells.values": [_columns_sorted(frame, metric, ascending)]}]))
    first = metrics.index(key) * 2 + (0 if frame.attrs.get("higher_is_better", True) else 1)
    figure.update_layout(updatemenus=[dict(buttons=buttons, active=first, **_DROPDOWN)],
                         title=dict(text=title or f"Metrics per slice ({len(frame)} slices)", **_TITLE),
                         height=min(900, 140 + 28 * len(frame)), margin=dict(t=110, l=10, r=10, b=10))
    return figure


def slice_metric_vs_baseline(evaluation: Evaluation, frame: pd.DataFrame | None = None) -> go.Figure:
    """One metric per slice, candidate next to the served baseline; the dropdown picks the metric.

    Without a baseline (the first push) only the candidate's bars are drawn.
    """
    frame = slice_metrics_frame(evaluation) if frame is None else frame
    baseline = slice_metrics_frame(evaluation, "baseline") if evaluation.has_baseline else None
    baseline = baseline.set_index("slice").reindex(frame["slice"]) if baseline is not None else None
    key = frame.attrs["key_metric"]
    metrics = [key] + [m for m in _metric_columns(frame) if m not in (key, COUNT_METRIC)]
    slices = list(frame["slice"])
    figure = go.Figure()
    figure.add_bar(name="candidate", y=slices, x=frame[key], orientation="h", marker_color=CANDIDATE_COLOR,
                   customdata=frame[COUNT_METRIC] if COUNT_METRIC in frame else None,
                   hovertemplate="%{y}: %{x:.4f} (n=%{customdata})<extra>candidate</extra>")
    if baseline is not None:
        figure.add_bar(name="served baseline", y=slices, x=baseline[key], orientation="h",
                       marker_color=BASELINE_COLOR, hovertemplate="%{y}: %{x:.4f}<extra>baseline</extra>")
    buttons = []
    for metric in metrics:
        xs = [frame[metric]] + ([baseline[metric]] if baseline is not None else [])
        buttons.append(dict(label=metric, method="update",
                            args=[{"x": xs}, {"xaxis.title.text": metric}]))
    figure.update_layout(
        barmode="group", updatemenus=[dict(buttons=buttons, active=0, **_DROPDOWN)],
        title=dict(text="Metric by slice, candidate vs the served model" if baseline is not None
                   else "Metric by slice (no served model to compare with)", **_TITLE),
        xaxis_title=key, yaxis=dict(autorange="reversed"),
        height=min(1400, 160 + (30 if baseline is not None else 20) * len(slices)),
        margin=dict(t=110, l=10, r=10, b=40), legend=dict(orientation="h", y=-0.08))
    return figure


def per_class_figure(evaluation: Evaluation) -> go.Figure | None:
    """Precision and recall per class (``per_class_frame``); None when the family has no classes."""
    frame = per_class_frame(evaluation)
    if frame.empty:
        return None
    metrics = [c for c in _metric_columns(frame) if c != "class_id"]
    figure = go.Figure()
    for metric in metrics:
        figure.add_bar(name=metric, x=frame["class"].astype(str), y=frame[metric],
                       hovertemplate="class %{x}: %{y:.4f}<extra>" + metric + "</extra>")
    figure.update_layout(barmode="group", title=dict(text="Per class (TFMA, threshold 0.5)", x=0.5),
                         xaxis_title="class", yaxis=dict(range=[0, 1.05]), height=420,
                         margin=dict(t=60, l=10, r=10, b=40))
    return figure


def runs_frame(evaluations: Sequence[Evaluation]) -> pd.DataFrame:
    """The overall metrics of each evaluation (oldest first), with its run, time and blessing."""
    rows = []
    for evaluation in evaluations:
        overall = tfma_results.slice_scalars(tfma_results.find_slice(
            tfma_results.load_result(evaluation.uri), "overall"))
        rows.append({"run": evaluation.run_name or str(evaluation.execution_id),
                     "finished": evaluation.finished, "blessed": evaluation.blessed,
                     "pushed": bool(evaluation.pushed_path), **overall})
    return pd.DataFrame(rows)


def key_metric_across_runs(evaluations: Sequence[Evaluation], metric: str | None = None) -> go.Figure:
    """The key metric of every evaluation in MLMD (``list_evaluations``): a time series across runs."""
    if not evaluations:
        raise ValueError("No evaluations to draw: run the pipeline first.")
    frame = runs_frame(evaluations)
    metric = metric or evaluations[-1].report_family.key_metric
    if metric not in frame:
        metric = next(c for c in _metric_columns(frame) if c != COUNT_METRIC)
    symbols = ["star" if p else "circle" if b else "x" for p, b in zip(frame["pushed"], frame["blessed"])]
    words = ["pushed" if p else "blessed" if b else "not blessed" for p, b in zip(frame["pushed"], frame["blessed"])]
    figure = go.Figure(go.Scatter(
        x=frame["finished"], y=frame[metric], mode="lines+markers", name=metric, text=frame["run"],
        customdata=words, marker=dict(symbol=symbols, size=12, color=CANDIDATE_COLOR),
        hovertemplate="run %{text}<br>" + metric + " %{y:.4f}<br>%{customdata}<extra></extra>"))
    figure.update_layout(title=dict(text=f"{metric} across runs (★ pushed, ● blessed, ✕ not blessed)", x=0.5),
                         xaxis_title="evaluation finished", yaxis_title=metric, height=380,
                         margin=dict(t=60, l=10, r=10, b=40))
    return figure


def comparison_table(evaluation: Evaluation) -> go.Figure | None:
    """Candidate vs baseline on the overall slice; None without a baseline."""
    frame = comparison_frame(evaluation)
    if frame.empty:
        return None
    figure = go.Figure(go.Table(header=dict(values=[f"<b>{c}</b>" for c in frame.columns], fill_color="#f3f3f3"),
                                cells=dict(values=[[_text(v) for v in frame[c]] for c in frame.columns])))
    figure.update_layout(title=dict(text="Overall: candidate vs the served model", x=0.5),
                         height=120 + 28 * len(frame), margin=dict(t=50, l=10, r=10, b=10))
    return figure


PLOTLY_MIMETYPE = "application/vnd.plotly.v1+json"
CONFIG = {"displaylogo": False, "responsive": True}
# Set by the library's loader (once per page); every figure's script waits on it.
LIBRARY_PROMISE = "window.tfxProjectPlotly"
_library_shown = False  # in this kernel: the next figure need not carry the library again

_LOADER = """<script type="text/javascript">
window.PlotlyConfig = {MathJaxConfig: 'local'};
%(promise)s = %(promise)s || (window.Plotly ? Promise.resolve(window.Plotly) : (async function () {
  const packed = Uint8Array.from(atob("%(packed)s"), c => c.charCodeAt(0));
  const source = await new Response(new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  const script = document.createElement("script");
  script.text = source;
  const amd = window.define;  // with require.js on the page, plotly.js would be an AMD module, not a global
  window.define = undefined;
  try { document.head.appendChild(script); } finally { window.define = amd; }
  return window.Plotly;
})());
</script>
"""
_FIGURE = """<div id="%(id)s" class="plotly-graph-div" style="height:%(height)dpx; width:100%%;"></div>
<script type="text/javascript">
(%(promise)s || Promise.reject(new Error("plotly.js is not loaded: run the notebook from its first cell")))
  .then(function (Plotly) { var f = %(figure)s; Plotly.newPlot("%(id)s", f.data, f.layout, %(config)s); });
</script>
"""


@lru_cache(maxsize=1)
def _packed_library() -> str:
    from plotly.offline import get_plotlyjs

    return base64.b64encode(gzip.compress(get_plotlyjs().encode(), compresslevel=9, mtime=0)).decode("ascii")


def library_html() -> str:
    """plotly.js from the installed wheel, compressed, unpacked by the page into a global ``Plotly`` (once)."""
    return _LOADER % {"promise": LIBRARY_PROMISE, "packed": _packed_library()}


def figure_html(figure: go.Figure) -> str:
    """The figure as HTML that draws once the library's loader (``library_html``) has run on the page."""
    import plotly.io as pio

    as_json = pio.to_json(figure, validate=False).replace("</", "<\\/")  # no "</script>" inside the script
    return _FIGURE % {"id": f"plot-{uuid.uuid4()}", "height": figure.layout.height or 525,
                      "promise": LIBRARY_PROMISE, "figure": as_json, "config": json.dumps(CONFIG)}


def notebook_bundle(figure: go.Figure, with_library: bool) -> dict[str, object]:
    """One output's forms: Plotly's JSON for JupyterLab's renderer, HTML (with the library if asked) for the rest."""
    import plotly.io as pio

    spec = json.loads(pio.to_json(figure, validate=False))
    html = figure_html(figure)
    return {PLOTLY_MIMETYPE: {**spec, "config": CONFIG},
            "text/html": library_html() + html if with_library else html}


def show(figure: go.Figure) -> None:
    """Display in a notebook: the first figure of the kernel carries plotly.js, the others only their data."""
    from IPython.display import display

    global _library_shown
    display(notebook_bundle(figure, with_library=not _library_shown), raw=True)
    _library_shown = True


def dashboard(evaluation: Evaluation, evaluations: Sequence[Evaluation] = ()) -> dict[str, go.Figure]:
    """Every view of one evaluation, by title, in reading order (figures that do not apply left out)."""
    frame = slice_metrics_frame(evaluation)
    views = {"Slices": slices_table(frame),
             "Metric by slice vs baseline": slice_metric_vs_baseline(evaluation, frame),
             "Candidate vs baseline": comparison_table(evaluation),
             "Per class": per_class_figure(evaluation)}
    if evaluations:
        views["Across runs"] = key_metric_across_runs(evaluations)
    return {title: figure for title, figure in views.items() if figure is not None}

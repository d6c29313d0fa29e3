"""The metrics notebook in the classic front end, as a person sees it: ``make notebook-classic`` itself,
a real headless Chromium, all cells run in the page, TFMA's own views checked in the DOM.

TFMA 0.47's views are an nbextension whose widget classes need widgetsnbextension 3.5's front end
(with 3.6's the outputs stay blank and the console says "Could not create a model"), and whose
Polymer bundle races require.js unless ``tfma_preload`` loads it (notebooks/classic/). Only a
browser shows either. The page is offline: TFMA's tables and charts ask Google Charts for their
drawing code (checked, the README says so), so they hold TFMA's elements and the evaluation's
data but no chart. Screenshots go to test-artifacts/tour/ (``make tour``).
"""
import base64
import json
import time

import pytest
from conftest import PROJECT_ROOT
from support.headless_chromium import PAINTED, chromium_page
from support.jupyter_server import make_notebook_classic, run_all_cells
from support.pipeline_runs import ARTIFACTS_DIR, cnn_run_with_baseline  # noqa: F401

from pipeline import report

NOTEBOOK = PROJECT_ROOT / "notebooks" / "inspect_metrics.ipynb"
TOUR_DIR = ARTIFACTS_DIR / "tour"
# What the widgets front end logs when it cannot build a TFMA view (the output then stays blank).
WIDGET_ERRORS = ("Could not create a model", "Could not instantiate widget", "_deserialize_state",
                 "Mismatched anonymous define", "Error displaying widget")

_KERNEL_READY = ("!!(window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
                 " && Jupyter.notebook.kernel.is_connected()"
                 " && document.querySelector('#kernel_indicator_icon.kernel_idle_icon'))")
# Cell > Run All, the menu's own action.
_RUN_ALL = "Jupyter.actions.call('jupyter-notebook:run-all-cells') || true"
_RESUME = """(() => {
  const remaining = [];
  Jupyter.notebook.get_cells().forEach((c, i) => {
    if (c.cell_type === 'code' && typeof c.input_prompt_number !== 'number') remaining.push(i);
  });
  Jupyter.notebook.execute_cells(remaining);
  return remaining.length;
})()"""
_PROGRESS = """(() => {
  const cells = Jupyter.notebook.get_cells().filter(c => c.cell_type === 'code');
  return {total: cells.length, done: cells.filter(c => typeof c.input_prompt_number === 'number').length,
          prompts: cells.map(c => c.input_prompt_number === undefined ? null : c.input_prompt_number),
          idle: !!document.querySelector('#kernel_indicator_icon.kernel_idle_icon'),
          failed: Array.from(document.querySelectorAll('.output_error')).map(e => e.textContent).slice(0, 1)};
})()"""
# TFMA's elements live in shadow roots (Polymer): walk them. Each notebook view keeps the data the
# kernel sent on its ``data`` property (slicing metrics: [{slice, metrics}]).
_DOM = """(() => {
  const tags = {};
  const walk = root => root.querySelectorAll('*').forEach(e => {
    const tag = e.tagName.toLowerCase();
    if (tag.startsWith('tfma-')) tags[tag] = (tags[tag] || 0) + 1;
    if (e.shadowRoot) walk(e.shadowRoot);
  });
  walk(document);
  const views = Array.from(document.querySelectorAll('tfma-nb-slicing-metrics'));
  return {tags,
          slicingData: views.map(v => (v.data || []).map(row => ({slice: row.slice, metrics: row.metrics['']['']}))),
          viewSizes: Array.from(document.querySelectorAll('tfma-nb-slicing-metrics, tfma-nb-time-series'))
                       .map(v => [v.getBoundingClientRect().width, v.getBoundingClientRect().height]),
          plots: document.querySelectorAll('.js-plotly-plot').length,
          tracebacks: Array.from(document.querySelectorAll('.output_error')).map(e => e.textContent),
          body: document.body.innerText};
})()"""


def _wait_for_views(page, slicing_views: int, timeout: float) -> dict:
    """The DOM facts once TFMA's views (and the elements they draw into) are all there, else after ``timeout``.

    No raise: with a front end that cannot build TFMA's widgets the tests say why.
    """
    deadline = time.monotonic() + timeout
    while True:
        dom = page.evaluate(_DOM)
        tags = dom["tags"]
        if (tags.get("tfma-nb-time-series") and tags.get("tfma-nb-slicing-metrics", 0) >= slicing_views
                # a metrics table in each slicing view and one in the time series
                and tags.get("tfma-metrics-table", 0) >= slicing_views + 1) or time.monotonic() > deadline:
            return dom
        time.sleep(1)


def _console_errors(page) -> list[str]:
    texts = []
    for event in page.events:
        if event.get("method") == "Runtime.consoleAPICalled" and event["params"]["type"] == "error":
            texts.append(" ".join(str(a.get("value", a.get("description", ""))) for a in event["params"]["args"]))
    return texts


def _screenshot_views(page) -> list:
    """A viewport screenshot of each TFMA view (nbclassic scrolls inside its page, not the window).

    The first with its cell's code above it; the others from their own output (a loop's views share a cell).
    """
    shots = []
    views = "document.querySelectorAll('tfma-nb-slicing-metrics, tfma-nb-time-series')"
    for index in range(min(page.evaluate(f"{views}.length"), 3)):
        around = "'.cell'" if index == 0 else "'.output_area'"
        page.evaluate(f"{views}[{index}].closest({around}).scrollIntoView({{block: 'start'}}) || true")
        page.evaluate(PAINTED)
        path = TOUR_DIR / f"notebook-classic-{index + 1}.png"
        path.write_bytes(base64.b64decode(page.send("Page.captureScreenshot", format="png")["data"]))
        shots.append(path)
    return shots


@pytest.fixture(scope="module")
def classic_page(cnn_run_with_baseline, tmp_path_factory):
    """``make notebook-classic`` on a copy of the notebook, every cell run in the page: DOM facts and more."""
    scratch = tmp_path_factory.mktemp("classic")
    env = {"PYTHONPATH": str(PROJECT_ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    with make_notebook_classic(NOTEBOOK, scratch / "root", PROJECT_ROOT, cnn_run_with_baseline, env) as server, \
            chromium_page(scratch / "chromium") as page:
        page.send("Runtime.enable")
        page.open(server.classic_url(NOTEBOOK.name), timeout=120)
        page.poll(_KERNEL_READY, "nbclassic with the notebook and an idle kernel", timeout=180)
        progress = run_all_cells(page, server, "nbclassic", _RUN_ALL, _PROGRESS, timeout=420, resume=_RESUME)
        dom = _wait_for_views(page, len(report.find_latest_evaluation(str(cnn_run_with_baseline))
                                         .report_family.slicing_features), timeout=30)
        dom["console_errors"] = _console_errors(page)
        dom["requested"] = page.requested_urls()
        TOUR_DIR.mkdir(parents=True, exist_ok=True)
        (TOUR_DIR / "notebook-classic.json").write_text(json.dumps(
            {**{k: dom[k] for k in ("tags", "viewSizes", "plots", "tracebacks", "console_errors")},
             "run_all_resumed_after": progress["resumed_after"]}, indent=1))
        dom["screenshots"] = _screenshot_views(page)
    return dom, progress


@pytest.mark.e2e
def test_classic_runs_every_cell_and_builds_every_widget(classic_page):
    dom, progress = classic_page
    assert progress["done"] == progress["total"] > 5, progress
    assert not dom["tracebacks"], dom["tracebacks"][:3]
    problems = [t for t in dom["console_errors"] + [dom["body"]] if any(e in t for e in WIDGET_ERRORS)]
    assert not problems, [p[:500] for p in problems[:3]]


@pytest.mark.e2e
def test_classic_run_all_runs_every_cell_without_the_harness_resuming(classic_page):
    """The harness runs the cells left when Run All stops with the kernel idle (run_all_cells'
    ``resume``), so the widget checks still see a whole notebook; a person would see a notebook that
    stopped halfway. This test reports that stall as what it is."""
    _, progress = classic_page
    assert progress["resumed_after"] is None, (
        f"nbclassic's Run All stopped after {progress['resumed_after']} of {progress['total']} code cells "
        f"with the kernel idle and no error; the harness ran the rest (prompts {progress['prompts']})")


@pytest.mark.e2e
def test_classic_draws_tfma_views_not_the_plotly_ones(classic_page, cnn_run_with_baseline):
    dom, _ = classic_page
    evaluation = report.find_latest_evaluation(str(cnn_run_with_baseline))
    features = evaluation.report_family.slicing_features
    tags = dom["tags"]
    assert tags.get("tfma-nb-slicing-metrics") == len(features), tags     # one per slicing feature
    for inner in ("tfma-slicing-metrics-browser", "tfma-metrics-table", "tfma-metrics-histogram"):
        assert tags.get(inner, 0) >= len(features), (inner, tags)
    assert tags.get("tfma-nb-time-series") == 1, tags                   # two evaluations: across runs
    assert all(width > 300 and height > 50 for width, height in dom["viewSizes"]), dom["viewSizes"]
    assert dom["plots"] == 0, "the classic front end shows TFMA's views in place of the Plotly ones"


@pytest.mark.e2e
def test_classic_views_hold_the_evaluation_found_through_mlmd(classic_page, cnn_run_with_baseline):
    """Each slicing view holds the latest evaluation's slices of its feature, with TFMA's values."""
    dom, _ = classic_page
    evaluation = report.find_latest_evaluation(str(cnn_run_with_baseline))
    frame = report.slice_metrics_frame(evaluation).set_index("slice")
    key = frame.attrs["key_metric"]
    shown = {row["slice"]: row["metrics"] for view in dom["slicingData"] for row in view}
    expected = [name for name in frame.index if name != "overall"]
    assert sorted(shown) == sorted(name.replace("=", ":") for name in expected), sorted(shown)
    for name in expected:
        assert shown[name.replace("=", ":")][key]["doubleValue"] == pytest.approx(frame.loc[name, key]), name


@pytest.mark.e2e
def test_classic_tfma_charts_need_google_charts(classic_page):
    """TFMA's tables and charts load Google Charts at view time (offline they stay empty): the README says so."""
    dom, _ = classic_page
    assert any(url.startswith("https://www.gstatic.com/charts/") for url in dom["requested"]), \
        [u for u in dom["requested"] if not u.startswith("http://127.0.0.1")][:10]
    assert all(p.stat().st_size > 10_000 for p in dom["screenshots"]) and len(dom["screenshots"]) >= 2

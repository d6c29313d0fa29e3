"""The metrics notebook as a person sees it: JupyterLab in a real headless Chromium, all cells run in the page.

Executing the notebook headless (test_notebook.py) proves the cells run; it cannot tell
whether a view draws, which is what failed for TFMA's widgets in JupyterLab ("Error
displaying widget"). Here JupyterLab runs on a free local port, the page runs every cell
with JupyterLab's own command, and the DOM is checked: the Plotly views drawn with the
evaluation's slices and classes in them, no widget error. Screenshots go to
test-artifacts/tour/ (the README's tour is made from them: ``make tour``).
"""
import base64
import html
import json
import os
import time

import pytest
from conftest import PROJECT_ROOT
from support.headless_chromium import PAINTED, chromium_page
from support.jupyter_server import jupyter_lab, run_all_cells
from support.pipeline_runs import ARTIFACTS_DIR, cnn_run_with_baseline  # noqa: F401

from pipeline import report

NOTEBOOK = PROJECT_ROOT / "notebooks" / "inspect_metrics.ipynb"
TOUR_DIR = ARTIFACTS_DIR / "tour"

# The notebook's panel in JupyterLab's main area (headless, nothing has focus: no currentWidget).
_PANEL = ("Array.from(window.jupyterapp ? jupyterapp.shell.widgets('main') : [])"
          ".find(w => w.sessionContext && w.content)")
_KERNEL_READY = (f"(() => {{ const p = {_PANEL}; "
                 "return !!(p && p.sessionContext.session?.kernel?.status === 'idle'); })()")
# Started, not awaited: the test polls the cells (below), so a run that stalls is reported with
# where it stands, not as a silent evaluate timeout. The command's own outcome is kept for that report.
_RUN_ALL = (f"(() => {{ const p = {_PANEL}; jupyterapp.shell.activateById(p.id); window.runAll = 'pending'; "
            "jupyterapp.commands.execute('notebook:run-all-cells').then("
            "() => { window.runAll = 'resolved'; }, e => { window.runAll = 'rejected: ' + e; }); "
            "return true; })()")
_PROGRESS = f"""(() => {{
  const STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]';
  const panel = {_PANEL};
  const cells = Array.from(panel.content.model.cells).filter(c => c.type === 'code');
  const kernel = panel.sessionContext.session?.kernel?.status;
  return {{total: cells.length, done: cells.filter(c => c.executionCount !== null).length,
          idle: kernel === 'idle',
          running: cells.findIndex(c => c.executionState === 'running'),
          kernel: kernel ?? 'none', command: window.runAll,
          dialogs: Array.from(document.querySelectorAll('.jp-Dialog')).map(d => d.innerText),
          failed: Array.from(document.querySelectorAll(STDERR)).map(e => e.textContent)
                    .filter(t => t.includes('Traceback')).slice(0, 1)}};
}})()"""
_DOM = """(() => {
  const STDERR = '[data-mime-type="application/vnd.jupyter.stderr"]';
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
  return {plots: plots.length,
          plotText: plots.map(p => p.textContent).join('\\n'),
          tracebacks: Array.from(document.querySelectorAll(STDERR)).map(e => e.textContent)
                        .filter(t => t.includes('Traceback')),
          body: document.body.innerText};
})()"""


def _viewport_png(page, path):
    path.write_bytes(base64.b64decode(page.send("Page.captureScreenshot", format="png")["data"]))
    return path


def _screenshot_views(page) -> list:
    """One viewport screenshot per Plotly view (JupyterLab scrolls inside its panel, not the page)."""
    shots = []
    page.evaluate("jupyterapp.shell.collapseLeft() || true")
    count = page.evaluate("document.querySelectorAll('.js-plotly-plot').length")
    for index in range(min(count, 4)):
        page.evaluate(_plot(index, ".scrollIntoView({block: 'start'}) || true"))
        page.evaluate(PAINTED)
        shots.append(_viewport_png(page, TOUR_DIR / f"notebook-lab-{index + 1}.png"))
    return shots


@pytest.fixture(scope="module")
def lab_page(cnn_run_with_baseline, tmp_path_factory):
    """JupyterLab with the notebook, every cell run in the page: (DOM facts, progress)."""
    scratch = tmp_path_factory.mktemp("lab")
    env = {"METRICS_OUTPUT_DIR": str(cnn_run_with_baseline), "PYTHONPATH": str(PROJECT_ROOT),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    with jupyter_lab(NOTEBOOK, scratch / "root", env) as server, chromium_page(scratch / "chromium") as page:
        page.open(server.lab_url(NOTEBOOK.name), timeout=120)
        page.poll(_KERNEL_READY, "JupyterLab with the notebook and an idle kernel", timeout=180)
        progress = run_all_cells(page, server, "JupyterLab", _RUN_ALL, _PROGRESS, timeout=420)
        page.poll("document.querySelectorAll('.js-plotly-plot .main-svg').length >= 4",
              "Plotly views drawn", timeout=60)
        dom = page.evaluate(_DOM)
        TOUR_DIR.mkdir(parents=True, exist_ok=True)
        (TOUR_DIR / "notebook-lab.json").write_text(json.dumps({k: dom[k] for k in ("plots", "tracebacks")}))
        dom["screenshots"] = _screenshot_views(page)
        dom["sort"] = _sort_by_dropdown(page)
    return dom, progress


def _sort_by_dropdown(page) -> dict:
    """Open the slices table's dropdown and pick another order, as a person would with the mouse."""
    cells = _plot(0, ".querySelectorAll('.cell-text')).map(e => e.textContent)", prefix="Array.from(")
    before = page.evaluate(cells)
    page.evaluate(_plot(0, ".scrollIntoView({block: 'start'}) || true"))
    _click(page, _plot(0, ".querySelector('.updatemenu-header')"))
    page.poll(_plot(0, ".querySelectorAll('.updatemenu-dropdown-button').length >= 2"), "the dropdown open",
              timeout=30, interval=0.1)
    page.evaluate(PAINTED)  # its buttons laid out where the click goes
    _click(page, _plot(0, ".querySelectorAll('.updatemenu-dropdown-button')[1]"))
    deadline = time.monotonic() + 30  # until the table shows the new order (the test says if it never does)
    after = page.evaluate(cells)
    while after == before and time.monotonic() < deadline:
        time.sleep(0.1)
        after = page.evaluate(cells)
    return {"before": before, "after": after}


def _plot(index: int, then: str, prefix: str = "") -> str:
    """JavaScript: the index-th Plotly view in the page, followed by ``then``."""
    return f"{prefix}document.querySelectorAll('.js-plotly-plot')[{index}]{then}"


def _click(page, element: str) -> None:
    """A real mouse click (press, release) at the centre of the element the JavaScript expression names."""
    x, y = page.evaluate(f"(() => {{ const r = {element}.getBoundingClientRect(); "
                         "return [r.x + r.width / 2, r.y + r.height / 2]; })()")
    for kind in ("mousePressed", "mouseReleased"):
        page.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)


@pytest.mark.e2e
def test_lab_runs_every_cell_without_errors(lab_page):
    dom, progress = lab_page
    assert progress["done"] == progress["total"] > 5, progress
    assert not dom["tracebacks"], dom["tracebacks"][:3]
    assert "Error displaying widget" not in dom["body"]


@pytest.mark.e2e
def test_lab_draws_the_project_views_with_their_data(lab_page, cnn_run_with_baseline):
    dom, _ = lab_page
    assert dom["plots"] >= 4, dom["plots"]   # slices table, by slice vs baseline, comparison, per class, runs
    evaluation = report.find_latest_evaluation(str(cnn_run_with_baseline))
    frame = report.slice_metrics_frame(evaluation)
    for name in frame["slice"]:                                   # every slice is a row of the table
        assert name in dom["plotText"], name
    key = frame.attrs["key_metric"]
    assert f"{frame.set_index('slice').loc['overall', key]:.4f}" in dom["plotText"]
    assert "served baseline" in dom["plotText"]                  # the second run has the first as baseline
    assert "across runs" in dom["plotText"]
    assert all(os.path.getsize(p) > 10_000 for p in dom["screenshots"]), dom["screenshots"]


@pytest.mark.e2e
def test_lab_table_sorts_from_its_dropdown(lab_page):
    dom, _ = lab_page
    assert dom["sort"]["before"] and dom["sort"]["after"], dom["sort"]
    assert dom["sort"]["after"] != dom["sort"]["before"]
    assert sorted(dom["sort"]["after"]) == sorted(dom["sort"]["before"])   # the same rows, in another order


@pytest.mark.e2e
def test_tour_run_summary_screenshot(cnn_run_with_baseline, tmp_path):
    """The run summary as a terminal shows it, for the README's tour (the text the shared run printed)."""
    summary = (ARTIFACTS_DIR / "run-summary.txt").read_text()
    assert "Run summary: cnn-pipeline" in summary, summary[-2000:]
    page_file = tmp_path / "summary.html"
    page_file.write_text('<html><body style="margin:0;background:#1e1e1e"><pre id="summary" style="color:#ddd;'
                         'font:14px/1.35 DejaVu Sans Mono,monospace;padding:16px;margin:0;display:inline-block">'
                         f"$ python -m pipeline run --model cnn\n{html.escape(summary)}</pre></body></html>")
    with chromium_page(tmp_path / "chromium") as page:
        page.open(page_file.as_uri())
        assert "Run summary: cnn-pipeline" in page.evaluate("document.getElementById('summary').innerText")
        TOUR_DIR.mkdir(parents=True, exist_ok=True)
        shot = page.screenshot(TOUR_DIR / "summary.png")
    assert os.path.getsize(shot) > 5_000

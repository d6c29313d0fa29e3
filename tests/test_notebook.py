"""notebooks/inspect_metrics.ipynb, executed headless (nbclient) against a real pipeline output.

Checks what a reader would see: no cell errors, the slice names, and metric values equal
to TFMA's, formatted as the notebook formats them (4 decimals).
"""
import os

from stackenv.tfma import tfma

import nbformat
import pytest
import scipy.stats
from conftest import PROJECT_ROOT
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbconvert import HTMLExporter
from support.headless_chromium import ChromiumNotFound, chromium_page, find_chromium
from support.pipeline_runs import ARTIFACTS_DIR, cnn_run_with_baseline  # noqa: F401

from pipeline import report
from pipeline.report import interactive

NOTEBOOK = PROJECT_ROOT / "notebooks" / "inspect_metrics.ipynb"
TEXT_TYPES = ("text/plain", "text/html", "text/markdown")
EXECUTED_LIMIT = 3_000_000   # bytes: plotly.js once (compressed), the figures' data, a few PNGs


def _output_text(notebook) -> str:
    parts = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.extend(output.get("data", {}).get(kind, "") for kind in TEXT_TYPES)
    return "\n".join(parts)


def test_committed_notebook_has_no_outputs():
    """Executed outputs (paths, numbers, images) do not belong in git."""
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in notebook.cells if c.cell_type == "code"]
    assert code[0].source.startswith("import stackenv")
    assert all(not c.outputs and c.execution_count is None for c in code)


@pytest.fixture(scope="module")
def executed(cnn_run_with_baseline):
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(notebook, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    try:
        client.execute(env={**os.environ, "METRICS_OUTPUT_DIR": str(cnn_run_with_baseline)})
    except CellExecutionError as error:
        pytest.fail(f"A notebook cell failed:\n{str(error)[-4000:]}")
    finally:
        ARTIFACTS_DIR.mkdir(exist_ok=True)
        nbformat.write(notebook, ARTIFACTS_DIR / "inspect_metrics.executed.ipynb")
    return notebook


@pytest.mark.e2e
def test_notebook_runs_without_errors(executed):
    errors = [o for c in executed.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    images = [o for c in executed.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 3   # bar chart, confusion matrix, misclassified images


@pytest.mark.e2e
def test_notebook_shows_slices_and_tfma_values(executed, cnn_run_with_baseline):
    text = _output_text(executed)
    for name in ["overall", "brightness=dark", "brightness=medium", "brightness=bright"] + [
            f"label={d}" for d in range(10)]:
        assert name in text, name
    evaluation = report.find_latest_evaluation(str(cnn_run_with_baseline))
    result = tfma.load_eval_result(evaluation.uri, model_name="candidate")
    overall = dict(result.slicing_metrics)[()][""][""]
    accuracy = overall["sparse_categorical_accuracy"]["doubleValue"]
    assert f"sparse_categorical_accuracy overall: {accuracy:.4f}" in text
    # Its 95% Wilson interval beside it, as scipy computes it from the hit count (an independent oracle).
    count = int(overall["example_count"]["doubleValue"])
    low, high = scipy.stats.binomtest(round(accuracy * count), count).proportion_ci(method="wilson")
    assert f"sparse_categorical_accuracy overall: {accuracy:.4f} [95% CI {low:.4f}-{high:.4f}] on {count}" in text
    assert "this model" in text and "95% CI low" in text  # the references table with its intervals
    assert f"{overall['sparse_categorical_accuracy_diff']['doubleValue']:.4f}" in text   # vs baseline
    assert "NOT blessed" in text and evaluation.uri in text


def _plotly_outputs(notebook) -> list[dict]:
    return [o for c in notebook.cells for o in c.get("outputs", []) if interactive.PLOTLY_MIMETYPE in o.get("data", {})]


@pytest.mark.e2e
def test_executed_notebook_is_small_with_plotly_js_once(executed):
    size = len(nbformat.writes(executed).encode())
    assert size <= EXECUTED_LIMIT, f"the executed notebook has {size} bytes"
    figures = _plotly_outputs(executed)
    assert len(figures) >= 4   # slices, metric by slice vs baseline, candidate vs baseline, per class, runs
    loaders = [o for o in figures if interactive.LIBRARY_PROMISE + " = " in o["data"]["text/html"]]
    assert len(loaders) == 1 and loaders[0] is figures[0]


# Runs in nbconvert's page: every figure drawn by plotly.js (an SVG each), with their text.
_DRAWN = """new Promise(done => { const check = () => {
  const plots = new Set(Array.from(document.querySelectorAll('.plotly-graph-div .main-svg'))
                        .map(s => s.closest('.plotly-graph-div')));
  if (plots.size >= %d || performance.now() > 60000) {
    done({plots: plots.size, text: Array.from(plots).map(p => p.textContent).join(' ')});
  } else { setTimeout(check, 250); } }; check(); })"""


@pytest.mark.e2e
def test_nbconvert_html_export_draws_the_figures(executed, tmp_path):
    """`jupyter nbconvert --to html` on the executed notebook: the Plotly views draw in a browser, offline."""
    body, _ = HTMLExporter().from_notebook_node(executed)
    for name in ("brightness=dark", "label=8", "served baseline"):
        assert name in body, name
    exported = tmp_path / "inspect_metrics.html"
    exported.write_text(body)
    try:
        binary = find_chromium()
    except ChromiumNotFound as error:
        pytest.fail(f"This test needs a real browser: {error}")
    expected = len(_plotly_outputs(executed))
    with chromium_page(tmp_path / "chromium-profile", binary) as page:
        page.open(f"file://{exported}")
        seen = page.evaluate(_DRAWN % expected, timeout=90)
    assert seen["plots"] == expected, seen
    assert "brightness=dark" in seen["text"] and "label=8" in seen["text"]

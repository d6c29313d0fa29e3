"""notebooks/inspect_metrics.ipynb, executed headless (nbclient) against a real pipeline output.

Checks what a reader would see: no cell errors, the slice names, and metric values equal
to TFMA's, formatted as the notebook formats them (4 decimals).
"""
import os

import nbformat
import pytest
import tensorflow_model_analysis as tfma
from conftest import PROJECT_ROOT
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from support.pipeline_runs import ARTIFACTS_DIR, cnn_run_with_baseline  # noqa: F401

from pipeline import report

NOTEBOOK = PROJECT_ROOT / "notebooks" / "inspect_metrics.ipynb"
TEXT_TYPES = ("text/plain", "text/html", "text/markdown")


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
    assert f"{overall['sparse_categorical_accuracy_diff']['doubleValue']:.4f}" in text   # vs baseline
    assert "NOT blessed" in text and evaluation.uri in text

"""The report's module boundaries: one job per module, dependencies pointing down.

Read from the source (ast), so these run in well under a second and need no pipeline run.
"""
import ast
from pathlib import Path

from conftest import PROJECT_ROOT

MAX_LINES = 400


def _imports(path: Path):
    """Top-level package names a module imports (absolute imports only, as the project writes them)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_report_modules_are_small():
    modules = sorted((PROJECT_ROOT / "pipeline" / "report").glob("*.py"))
    assert len(modules) >= 8, modules   # a package of one-job modules, not one file
    too_long = {m.name: n for m in modules if (n := len(m.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not too_long, too_long


def test_tfma_and_mlmd_readers_sit_below_their_users():
    """The Pusher (components/) reads TFMA results through artifacts/, never through pipeline/."""
    tfma_reader = _imports(PROJECT_ROOT / "artifacts" / "tfma_results.py")
    assert not {n for n in tfma_reader if n.split(".")[0] in ("pipeline", "components", "models")}, tfma_reader
    pusher = _imports(PROJECT_ROOT / "components" / "pusher.py")
    assert "artifacts.tfma_results" in pusher and not {n for n in pusher if n.startswith("pipeline")}, pusher
    for user in ("results/summary.py", "report/tables.py", "report/validation.py", "report/evaluations.py"):
        assert "artifacts.tfma_results" in _imports(PROJECT_ROOT / "pipeline" / user), user
    summary = _imports(PROJECT_ROOT / "pipeline" / "results" / "summary.py")
    assert not any(n.startswith("tensorflow_model_analysis") for n in summary), summary


def test_report_reads_mlmd_only_through_pipeline_mlmd():
    """No second lineage reader: only pipeline/results/mlmd.py talks to ml_metadata."""
    modules = sorted((PROJECT_ROOT / "pipeline").rglob("*.py"))
    readers = [m.relative_to(PROJECT_ROOT).as_posix() for m in modules
               if any(n.startswith("ml_metadata") for n in _imports(m))]
    assert readers == ["pipeline/results/mlmd.py"], readers


def test_family_pictures_are_reachable_by_dotted_path():
    from pipeline.families import family_names
    from pipeline.report import get_report_family
    from pipeline.report.families import resolve
    from pipeline.report.pictures_cnn import cnn_pictures

    assert resolve(get_report_family("cnn").pictures) is cnn_pictures
    for family in map(get_report_family, family_names()):
        for path in filter(None, (family.pictures, family.samples)):
            assert callable(resolve(path)), path

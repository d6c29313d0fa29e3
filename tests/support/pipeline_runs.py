"""Pipeline outputs shared by the metrics-inspection tests (report and notebook) and batch scoring.

Import the fixture into a test module (``from pipeline_runs import cnn_run_with_baseline``).
pytest registers an imported fixture once per importing module, so session scope alone
would run the pipeline once per module; the module-level cache makes it once per session.
"""
from pathlib import Path

import pytest
from conftest import PROJECT_ROOT, run_cli

ARTIFACTS_DIR = PROJECT_ROOT / "test-artifacts"   # gitignored; CI keeps it
PIPELINE_NAME = "cnn-pipeline"
FIRST_RUN = ("--train-steps", "40", "--min-accuracy", "0.3", "--gate-margin", "-1")  # -1: the floor gates
# A different seed retrains (the Evaluator's inputs change, so it re-runs and compares with
# the served first model, giving real diffs), and an unreachable floor makes the gate fail,
# so the not-blessed path is exercised for real. Transform stays cached. --profile: the
# newest Trainer's logs hold a profiler trace for the tensorboard test. --warm-start: it starts
# from the first (blessed) model, which test_warm_start checks through MLMD.
SECOND_RUN = ("--train-steps", "40", "--min-accuracy", "0.999", "--seed", "7", "--profile", "2,4", "--warm-start")
# Both runs score SCORE_FOLDER (`run --score`, components/scoring.py): the first with its blessed model,
# the second, not blessed, scores nothing (test_scoring.py). Digits 0-5 as 8x8 PNGs, one in a sub-folder.
SCORE_FOLDER = "score-inputs"
SCORED_FILES = ("d0.png", "d1.png", "d2.png", "d3.png", "d4.png", "more/d5.png")


def write_score_folder(folder: Path) -> Path:
    """The bundled digits 0-5 as PNG files (what a user would score), under ``folder``."""
    from PIL import Image

    from data.images.digits import digit_images

    images = digit_images(8, 1)
    for index, name in enumerate(SCORED_FILES):
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(images.pixels[index][:, :, 0]).save(folder / name)
    return folder


def _run(output: Path, args) -> str:
    result = run_cli("run", "--model", "cnn", "--output", output, *args)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    ARTIFACTS_DIR.mkdir(exist_ok=True)
    (ARTIFACTS_DIR / "run-summary.txt").write_text(result.stdout)   # the README tour shows the last one
    return result.stdout


_outputs: dict[str, Path] = {}
#: The printed summary of each run of the fixture ("first", "second").
summaries: dict[str, str] = {}


@pytest.fixture(scope="session")
def cnn_run_with_baseline(tmp_path_factory) -> Path:
    """Output dir with two evaluations: a blessed, pushed one, then one with a baseline that fails the gate."""
    if "cnn" not in _outputs:
        output = tmp_path_factory.mktemp("metrics-run")
        _outputs["score"] = write_score_folder(tmp_path_factory.mktemp(SCORE_FOLDER))
        score = ("--score", _outputs["score"])
        summaries["first"] = _run(output, (*FIRST_RUN, *score))
        summaries["second"] = _run(output, (*SECOND_RUN, *score))
        _outputs["cnn"] = output
    return _outputs["cnn"]


def scored_folder() -> Path:
    """The folder both runs of ``cnn_run_with_baseline`` scored (after the fixture ran)."""
    return _outputs["score"]

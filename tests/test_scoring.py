"""Batch scoring inside the pipeline (``run --score DIR``: components/scoring.py, TFX's BulkInferrer).

The real runs are the two of the shared fixture (tests/support/pipeline_runs.py), which both score the
same folder of digit PNGs: the first with its blessed model, the second with a model the gate refuses.
Predictions are checked against ``predict`` on the same files: a different path (the ``predict_image``
signature on the pushed SavedModel, not the BulkInferrer's Examples through ``score_examples``).
"""
import csv
import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import DIGIT_FACTS, run_cli
from support.pipeline_runs import (  # noqa: F401 (fixture)
    FIRST_RUN,
    SCORED_FILES,
    cnn_run_with_baseline,
    scored_folder,
    summaries,
    write_score_folder,
)

from components.scoring import INPUTS_FILE, SCORE_SPLIT, ScoringExampleGenExecutor
from pipeline.results.score_summary import UnreadableScoringFiles, check_unreadable

SCORES_LINE = re.compile(r"^Scores: (\d+) rows \((\d+) scored, (\d+) unreadable\) -> (\S+) and scores\.parquet$",
                         re.MULTILINE)
BROKEN_PNG = b"\x89PNG\r\n\x1a\n" + b"cut short"


def test_a_blessed_run_scores_every_file_as_predict_does(cnn_run_with_baseline):
    match = SCORES_LINE.search(summaries["first"])
    assert match, summaries["first"][-2500:]
    assert match.group(1, 2, 3) == (str(len(SCORED_FILES)), str(len(SCORED_FILES)), "0")
    csv_path = Path(match.group(4))
    with csv_path.open() as handle:
        rows = list(csv.DictReader(handle))
    records = pq.read_table(csv_path.with_name("scores.parquet")).to_pylist()
    assert [row["file"] for row in rows] == [record["file"] for record in records] == sorted(SCORED_FILES)

    folder = scored_folder()
    # The first run's model is still the one served: the second run's was not blessed.
    result = run_cli("predict", "--model-dir", cnn_run_with_baseline / "serving" / "cnn",
                     *(folder / name for name in sorted(SCORED_FILES)))
    assert result.returncode == 0, result.stderr[-3000:]
    predicted = [line.split("\t") for line in result.stdout.splitlines()]
    assert [(Path(path).relative_to(folder).as_posix(), label) for path, label, _ in predicted] == [
        (row["file"], row["prediction"]) for row in rows]
    for (_, _, confidence), row, record in zip(predicted, rows, records):
        assert abs(float(row["score"]) - float(confidence)) <= 1.5e-3   # predict prints 3 decimals
        assert record["prediction"] == row["prediction"] and record["error"] is None and row["error"] == ""
        assert len(record["scores"]) == 10 and record["score"] == pytest.approx(max(record["scores"]))
        assert json.loads(row["scores"]) == pytest.approx(record["scores"], rel=1e-5)


def test_a_run_whose_model_is_not_blessed_scores_nothing_and_says_why(cnn_run_with_baseline):
    second = summaries["second"]
    assert "Blessed: NO" in second
    line = next(line for line in second.splitlines() if line.startswith("Scores:"))
    assert line.startswith("Scores: nothing scored: the model was not blessed, so the BulkInferrer scored "
                           "nothing ("), line
    writes = sorted((cnn_run_with_baseline / "tfx" / "cnn-pipeline" / "ScoreWriter" / "scores").iterdir(),
                    key=lambda path: int(path.name))
    assert len(writes) == 2 and (writes[0] / "scores.csv").exists()
    assert sorted(path.name for path in writes[1].iterdir()) == ["scores.json"]


def _scoring_examples(tmp_path: Path, folder: Path):
    """The real ScoringExampleGen executor on ``folder``, outside a pipeline (seconds)."""
    from tfx.types import standard_artifacts

    training, examples = standard_artifacts.Examples(), standard_artifacts.Examples()
    training.uri, examples.uri = str(tmp_path / "training"), str(tmp_path / "examples")
    ScoringExampleGenExecutor().Do({"training_examples": [training]}, {"examples": [examples]}, {
        "score_dir": str(folder), "reader": "data.scoring.image_example",
        "reader_config": json.dumps(DIGIT_FACTS)})
    return Path(examples.uri)


def test_an_unreadable_file_is_listed_with_why_and_the_rest_become_examples(tmp_path):
    import tensorflow as tf

    folder = write_score_folder(tmp_path / "inputs")
    (folder / "more" / "broken.png").write_bytes(BROKEN_PNG)
    examples = _scoring_examples(tmp_path, folder)
    listed = json.loads((examples / INPUTS_FILE).read_text())["inputs"]
    assert [row["file"] for row in listed] == sorted([*SCORED_FILES, "more/broken.png"])
    broken = next(row for row in listed if row["file"] == "more/broken.png")
    assert "cannot be read" in broken["error"] and "--score folder" in broken["error"]
    assert all(row["error"] is None for row in listed if row is not broken)
    written = list((examples / f"Split-{SCORE_SPLIT}").iterdir())
    assert sum(1 for _ in tf.data.TFRecordDataset([str(p) for p in written], compression_type="GZIP")) == len(
        SCORED_FILES)


def test_the_unreadable_files_paragraph_names_each_and_exits_2(tmp_path):
    (tmp_path / "scores.json").write_text(json.dumps({
        "root": "/data/new", "inputs": 7, "rows": 7, "scored": 6,
        "unreadable": [["more/broken.png", "Image file /data/new/more/broken.png cannot be read (OSError)"]]}))
    with pytest.raises(UnreadableScoringFiles) as caught:
        check_unreadable(str(tmp_path))
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith("1 of the 7 file(s) in the --score folder /data/new could not be read")
    assert "more/broken.png (Image file" in str(caught.value)
    check_unreadable(None)  # a run that did not score: nothing to say


def test_an_empty_score_folder_is_one_paragraph(tmp_path):
    from data.errors import DataError

    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"--score folder .*empty holds no file to score"):
        _scoring_examples(tmp_path, tmp_path / "empty")


@pytest.mark.slow
def test_a_run_with_a_corrupt_file_scores_the_rest_names_it_and_exits_nonzero(tmp_path):
    folder = write_score_folder(tmp_path / "inputs")
    (folder / "broken.png").write_bytes(BROKEN_PNG)
    result = run_cli("run", "--model", "cnn", "--output", tmp_path / "out", *FIRST_RUN, "--score", folder)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    match = SCORES_LINE.search(result.stdout)
    assert match and match.group(1, 2, 3) == (str(len(SCORED_FILES) + 1), str(len(SCORED_FILES)), "1")
    assert "1 of the 7 file(s) in the --score folder" in result.stderr and "broken.png (Image file" in result.stderr
    with Path(match.group(4)).open() as handle:
        broken = next(row for row in csv.DictReader(handle) if row["file"] == "broken.png")
    assert broken["prediction"] == "" and "cannot be read" in broken["error"]

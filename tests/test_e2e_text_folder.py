"""A documentation folder as a user has it, through the whole pipeline (CLI, CI-sized).

Real Debian files (compressed NEWS and changelog files, Markdown READMEs: no ``.txt`` among
them, tests/text_folders.py) in nested folders, plus a short, an empty, a Latin-1 and a
binary file, a fifo and a symlink loop. The run must not stop on any of them: it pushes a
model, and the summary, the ExampleGen's data facts and the report name what was not used.
"""
import os

import pytest
from conftest import run_cli
from support.text_folders import LATIN1, debian_mixed_folder

from pipeline import mlmd
from pipeline.config import PipelineConfig

pytestmark = pytest.mark.e2e

RUN_ARGS = ("--model", "seq2seq", "--train-steps", "4", "--eval-steps", "2", "--vocab-size", "200",
            "--min-accuracy", "0.01", "--gate-margin", "-1")


@pytest.fixture(scope="module")
def folder_run(tmp_path_factory):
    docs = tmp_path_factory.mktemp("docs")
    expected = debian_mixed_folder(docs)
    os.mkfifo(docs / "news" / "pipe")
    (docs / "loop").symlink_to("loop")
    expected |= {"news/pipe": "special", "loop": "loop"}
    output = tmp_path_factory.mktemp("docs-run")
    result = run_cli("run", "--data", docs, "--output", output, *RUN_ARGS, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return PipelineConfig(model="seq2seq", output_dir=str(output)), result, expected


def test_mixed_folder_pushes_a_model_and_the_summary_names_what_it_skipped(folder_run):
    from data.serving_dir import list_versions

    config, result, _ = folder_run
    (line,) = [line for line in result.stdout.splitlines() if line.startswith("Corpus: ")]
    assert (" 5 not used: 1 shorter than one window (short.txt), 1 empty (empty.txt), 1 binary (blob.bin), "
            "1 not a regular file (news/pipe), 1 symlink loop (loop); 1 not UTF-8, read with a guessed "
            f"encoding: {LATIN1} (cp1252)") in line, line
    assert f"Pushed: {config.serving_model_dir}" in result.stdout
    assert len(list_versions(config.serving_model_dir)) == 1


def test_data_facts_and_report_list_every_file_not_used(folder_run):
    from components.data_facts import read_facts
    from pipeline.graph import EXAMPLE_GEN
    from pipeline.report.corpus import corpus_data, skipped_frame
    from pipeline.report.evaluations import find_latest_evaluation

    config, _, expected = folder_run
    store = mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
    examples = mlmd.latest_run(store, config.pipeline_name)[EXAMPLE_GEN].outputs["examples"][0].uri
    corpus = read_facts(examples)["corpus"]
    assert {s["document"]: s["reason"] for s in corpus["skipped"]} == expected
    assert corpus["documents"] >= 5 and corpus["words"] > 1000
    data = corpus_data(find_latest_evaluation(config.output_dir))
    assert data["corpus"] == corpus and data["line"].startswith(f"{corpus['documents']} documents read")
    frame = skipped_frame(data)
    assert sorted(frame["file"]) == sorted([*expected, LATIN1])

"""``python -m pipeline prepare`` through the CLI, as the Dockerfile runs it (kubeflow/Dockerfile bakes
the default data into the image with it, and compiled pipelines find that data by its fingerprint):
twice, into two places, it names the same fingerprint and writes the same records."""
import json
from pathlib import Path
from pydoc_data.topics import topics

import pytest
from conftest import run_cli


def _prepare(output: Path, *args) -> Path:
    result = run_cli("prepare", "--output", output, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    (printed,) = result.stdout.split()
    return Path(printed)


@pytest.mark.parametrize("family", ["cnn", "seq2seq"])
def test_prepare_twice_gives_the_same_fingerprint_and_records(tmp_path, family):
    args = ["--model", family]
    if family == "seq2seq":  # a small corpus of its own: the default one takes minutes to window
        corpus = tmp_path / "corpus"
        corpus.mkdir()
        for name in sorted(topics)[:6]:
            (corpus / f"{name}.txt").write_text(topics[name], encoding="utf-8")
        args += ["--data", str(corpus)]
    first, second = _prepare(tmp_path / "a", *args), _prepare(tmp_path / "b", *args)
    assert first.parent == tmp_path / "a" / "data" and second.parent == tmp_path / "b" / "data"
    assert first.name == second.name and len(first.name) == 16  # the fingerprint
    records = sorted(p.name for p in first.iterdir() if p.name != "manifest.json")
    assert records and records == sorted(p.name for p in second.iterdir() if p.name != "manifest.json")
    for name in records:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
    manifests = [json.loads((d / "manifest.json").read_text()) for d in (first, second)]
    for manifest, folder in zip(manifests, (first, second)):
        assert manifest.pop("examples_dir") == str(folder)  # the one difference: where it was written
    assert manifests[0] == manifests[1]

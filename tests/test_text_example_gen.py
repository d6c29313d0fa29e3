"""The text ExampleGen (real Beam, real TFX executor) writes the windows and splits the prepare step wrote."""
from __future__ import annotations

from pathlib import Path

import pytest
from support.example_gen_helpers import run_example_gen, run_import_example_gen
from tensorflow.train import Example
from tfx.proto import example_gen_pb2

from components.data_facts import read_facts
from components.ingest_config import WHOLE_FOLDER, settings_config
from components.text_example_gen import TextExampleGenExecutor, input_config
from data.errors import DataError
from data.text import prepare_text_dataset
from data.text_ingest import BUNDLED_TOPICS, list_documents

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "jumbled boxing frogs and sphinxes of black quartz judge my vow").split()


def _corpus(root: Path, sizes: dict[str, int]) -> Path:
    for name, count in sizes.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(" ".join(WORDS[(i * 7 + len(name)) % len(WORDS)] for i in range(count)))
    return root


def _ids(records: list[bytes]) -> dict[str, Example]:
    parsed = [Example.FromString(r) for r in records]
    return {e.features.feature["example_id"].bytes_list.value[0].decode(): e for e in parsed}


def _same_as_prepare(source: Path, tmp_path: Path) -> None:
    settings = {"context_words": 6, "target_words": 2, "stride": 2}
    manifest = prepare_text_dataset(str(source), tmp_path / "cache", **settings)
    old = run_import_example_gen(
        manifest.examples_dir, "unused", tmp_path / "old", output_config=example_gen_pb2.Output(),
        input_config=example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name=n, pattern=p)
                                                   for n, p in manifest.extra["split_patterns"].items()]))
    new = run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "new",
                          output_config=example_gen_pb2.Output(), input_config=input_config(WHOLE_FOLDER),
                          custom_config=settings_config(**settings))
    assert set(new) == {"train", "eval"}
    for split in ("train", "eval"):
        assert len(new[split]) == len(old[split]) > 0, split
        assert _ids(new[split]) == _ids(old[split]), split
    facts = read_facts(str(tmp_path / "new"))
    assert facts["split"] == manifest.extra["split"] and facts["num_examples"] == manifest.num_examples


def test_folder_of_documents_matches_prepare(tmp_path: Path) -> None:
    # Five documents: whole documents are held out (data/text_split.py "documents").
    source = _corpus(tmp_path / "docs", {f"d{i}.txt": 60 + 13 * i for i in range(5)} | {"sub/e.txt": 90})
    _same_as_prepare(source, tmp_path)


def test_one_file_matches_prepare(tmp_path: Path) -> None:
    # One document: blocks inside it, gap windows dropped (the "blocks" method).
    _corpus(tmp_path / "one", {"book.txt": 700})
    _same_as_prepare(tmp_path / "one" / "book.txt", tmp_path)


def test_bundled_corpus_is_listed_without_a_path() -> None:
    refs = list_documents(BUNDLED_TOPICS)
    assert len(refs) > 50 and all(not r.uri for r in refs)


def test_short_file_is_the_prepare_paragraph(tmp_path: Path) -> None:
    source = _corpus(tmp_path / "docs", {"long.txt": 400, "tiny.txt": 3})
    with pytest.raises(Exception) as caught:
        run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "out", output_config=example_gen_pb2.Output(),
                        input_config=input_config(WHOLE_FOLDER))
    from stackenv.errors import find_in_chain

    error = find_in_chain(caught.value, DataError)
    assert error is not None and "tiny.txt has only 3 words" in str(error), caught.value

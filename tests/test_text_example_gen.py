"""The text ExampleGen (real Beam, real TFX executor) writes the windows and splits the prepare step wrote."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from support.example_gen_helpers import recorded_facts, run_example_gen, run_import_example_gen
from support.text_folders import LATIN1, debian_mixed_folder
from tensorflow.train import Example
from tfx.proto import example_gen_pb2

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


def _same_as_prepare(source: Path, tmp_path: Path) -> dict:
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
    facts = recorded_facts(tmp_path / "new")
    assert facts["split"] == manifest.extra["split"] and facts["num_examples"] == manifest.num_examples
    assert facts["corpus"] == manifest.extra["corpus"]
    return facts


def test_folder_of_documents_matches_prepare(tmp_path: Path) -> None:
    # Five documents: whole documents are held out (data/text_split.py "documents").
    source = _corpus(tmp_path / "docs", {f"d{i}.txt": 60 + 13 * i for i in range(5)} | {"sub/e.txt": 90})
    _same_as_prepare(source, tmp_path)


def test_one_file_matches_prepare(tmp_path: Path) -> None:
    # One document: blocks inside it, gap windows dropped (the "blocks" method).
    _corpus(tmp_path / "one", {"book.txt": 700})
    _same_as_prepare(tmp_path / "one" / "book.txt", tmp_path)


def test_debian_documentation_folder_matches_prepare_and_names_what_it_skipped(tmp_path: Path) -> None:
    """Real compressed NEWS/changelog files and Markdown READMEs (no .txt among them), plus a short,
    an empty, a Latin-1 and a binary file, a fifo and a symlink loop: both readers agree."""
    source = tmp_path / "docs"
    expected = debian_mixed_folder(source)
    os.mkfifo(source / "news" / "pipe.txt")
    (source / "loop").symlink_to("loop")
    expected |= {"news/pipe.txt": "special", "loop": "loop"}
    facts = _same_as_prepare(source, tmp_path)
    corpus = facts["corpus"]
    assert {s["document"]: s["reason"] for s in corpus["skipped"]} == expected
    assert corpus["guessed_encodings"] == [{"document": LATIN1, "encoding": "cp1252"}]
    read = {p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file() and not p.is_symlink()
            and p.name not in expected and p.parent.name + "/" + p.name not in expected}
    assert corpus["documents"] == len(read) >= 5


def test_bundled_corpus_is_listed_without_a_path() -> None:
    refs, skipped = list_documents(BUNDLED_TOPICS)
    assert len(refs) > 50 and all(not r.uri for r in refs) and skipped == []


def test_short_file_is_skipped_and_named(tmp_path: Path) -> None:
    source = _corpus(tmp_path / "docs", {"long.txt": 400, "tiny.txt": 3})
    run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "out", output_config=example_gen_pb2.Output(),
                    input_config=input_config(WHOLE_FOLDER))
    corpus = recorded_facts(tmp_path / "out")["corpus"]
    assert (corpus["documents"], corpus["words"]) == (1, 400)
    assert corpus["skipped"] == [{"document": "tiny.txt", "reason": "short", "detail": "3 words, a window needs 20"}]


def test_nothing_usable_is_the_prepare_paragraph(tmp_path: Path) -> None:
    source = _corpus(tmp_path / "docs", {"tiny.txt": 3})
    (source / "blob.dat").write_bytes(b"\x00" * 10)
    with pytest.raises(Exception) as caught:
        run_example_gen(TextExampleGenExecutor, str(source), tmp_path / "out", output_config=example_gen_pb2.Output(),
                        input_config=input_config(WHOLE_FOLDER))
    from stackenv.errors import find_in_chain

    error = find_in_chain(caught.value, DataError)
    assert error is not None, caught.value
    assert "no document is usable. Of the 2 files found, 2 could not be used: 1 shorter than one window " \
           "(tiny.txt), 1 binary (blob.dat)." in str(error)


def test_driver_fingerprints_a_folder_with_a_loop_a_fifo_and_a_dangling_link(tmp_path: Path) -> None:
    """TFX's own fingerprint stats every top-level entry and raises on a symlink loop; the driver
    (local runs, and the Kubeflow resolution step) falls back to the tree's fingerprint."""
    from tfx.components.example_gen import utils
    from tfx.types import standard_component_specs as keys
    from tfx.utils import proto_utils

    from components.ingest_driver import resolve_input

    source = _corpus(tmp_path / "docs", {"a.txt": 50, "sub/b.txt": 50})
    (source / "loop").symlink_to("loop")
    (source / "sub" / "up").symlink_to("..")
    (source / "gone").symlink_to(tmp_path / "nothing")
    os.mkfifo(source / "pipe")

    def fingerprint() -> str:
        resolved = resolve_input({keys.INPUT_BASE_KEY: str(source),
                                  keys.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config(WHOLE_FOLDER))})
        assert (resolved[utils.SPAN_PROPERTY_NAME], resolved[utils.VERSION_PROPERTY_NAME]) == (0, None)
        return resolved[utils.FINGERPRINT_PROPERTY_NAME]

    first = fingerprint()
    assert "tree:files=2," in first
    (source / "sub" / "b.txt").write_text("changed " * 60)
    assert fingerprint() != first


def test_uri_folder_reads_like_a_local_one(tmp_path: Path) -> None:
    """Through tf.io.gfile (TF's ram:// filesystem stands in for gs:// / s3://: the same gfile
    calls, no local os.stat): the same documents, skips and windows as the local folder."""
    import gzip

    import tensorflow as tf

    local = _corpus(tmp_path / "docs", {f"d{i}.txt": 80 + 9 * i for i in range(5)})
    (local / "notes.md.gz").write_bytes(gzip.compress(b"# Notes\n\n" + b"markdown words " * 40))
    (local / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00")
    (local / "tiny.txt").write_text("too short")
    uri = f"ram://text-{os.getpid()}-{tmp_path.name}"
    for path in local.iterdir():
        tf.io.gfile.makedirs(uri)
        tf.io.gfile.copy(str(path), f"{uri}/{path.name}")
    settings = settings_config(context_words=6, target_words=2, stride=2)
    runs = {}
    for name, source in (("local", str(local)), ("uri", uri)):
        splits = run_example_gen(TextExampleGenExecutor, source, tmp_path / name, custom_config=settings,
                                 output_config=example_gen_pb2.Output(), input_config=input_config(WHOLE_FOLDER))
        runs[name] = ({split: sorted(_ids(records)) for split, records in splits.items()},
                      recorded_facts(tmp_path / name)["corpus"])
    assert runs["uri"] == runs["local"]
    corpus = runs["uri"][1]
    assert corpus["documents"] == 6 and {s["document"]: s["reason"] for s in corpus["skipped"]} == {
        "photo.png": "format", "tiny.txt": "short"}


def test_the_windows_pass_counts_every_window_it_writes_of_the_total(tmp_path: Path, monkeypatch) -> None:
    """The runner's live line through the pass after the count of documents: windows made, of the split's
    train and eval windows (gap windows are dropped, so they count in neither)."""
    from stackenv import progress

    from data.text_ingest import DOCUMENTS_READ, WINDOWS_MADE

    monkeypatch.setenv(progress.PROGRESS_DIR_ENV, str(tmp_path / "progress"))
    (tmp_path / "progress").mkdir()
    _corpus(tmp_path / "one", {"book.txt": 700})  # blocks: gap windows dropped
    written = run_example_gen(TextExampleGenExecutor, str(tmp_path / "one" / "book.txt"), tmp_path / "new",
                              output_config=example_gen_pb2.Output(), input_config=input_config(WHOLE_FOLDER),
                              custom_config=settings_config(context_words=6, target_words=2, stride=2))
    progress.flush()
    counts, totals = progress.read(str(tmp_path / "progress"))
    windows = len(written["train"]) + len(written["eval"])
    assert recorded_facts(tmp_path / "new")["split"]["gap_windows_total"] > 0
    assert counts[WINDOWS_MADE] == totals[WINDOWS_MADE] == windows, (counts, totals, windows)
    assert counts[DOCUMENTS_READ] == totals[DOCUMENTS_READ] == 1

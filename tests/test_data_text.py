"""Tests of data.text: corpus reading, windowing, bad inputs, cache (tiny files, no downloads)."""
from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import tensorflow as tf  # noqa: E402  (after the data package, which imports stackenv)

from data import text_features as features
from data.errors import DataError
from data.text import position_bucket, prepare_text_dataset, window_count
from data.tfrecords import DatasetManifest


def read_all(manifest: DatasetManifest) -> list[dict[str, str]]:
    """Every record parsed with the documented spec, in file order."""
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in features.ALL_FEATURES}
    files = sorted(tf.io.gfile.glob(manifest.examples_glob))
    assert files, manifest.examples_glob
    rows = []
    for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(50_000):
        parsed = {k: v.numpy() for k, v in tf.io.parse_example(batch, spec).items()}
        for i in range(len(parsed[features.CONTEXT])):
            rows.append({k: parsed[k][i].decode("utf-8") for k in spec})
    return rows


def words(n: int, prefix: str = "w") -> str:
    return " ".join(f"{prefix}{i}" for i in range(n))


def mtimes(folder: str | Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in Path(folder).iterdir()}


# ------------------------------------------------------------------------ default corpus


@pytest.fixture(scope="module")
def topics_dataset(tmp_path_factory):
    return prepare_text_dataset(None, tmp_path_factory.mktemp("topics-cache"))


def test_default_corpus_is_pydoc_topics_windowed(topics_dataset):
    from pydoc_data.topics import topics

    m = topics_dataset
    assert m.kind == "text" and m.classes == [] and m.image_shape is None
    assert m.extra["documents"] == sorted(topics) and m.extra["num_documents"] == len(topics)
    assert (m.extra["context_words"], m.extra["target_words"], m.extra["stride"]) == (16, 4, 2)
    assert m.extra["split_feature"] == features.SPLIT_FEATURE == features.DOCUMENT
    expected = {name: window_count(len(topics[name].split()), 16, 4, 2) for name in topics}
    assert m.extra["document_windows"] == expected
    assert m.num_examples == sum(expected.values())
    assert 10_000 < m.num_examples < 50_000  # "tens of thousands of windows max"

    rows = read_all(m)
    assert len(rows) == m.num_examples
    assert len({r[features.EXAMPLE_ID] for r in rows}) == len(rows)
    assert all(len(r[features.CONTEXT].split(" ")) == 16 for r in rows)
    assert all(len(r[features.TARGET].split(" ")) == 4 for r in rows)
    assert {r[features.POSITION] for r in rows} == set(features.POSITION_BUCKETS)
    first = rows[0]
    doc_words = topics[first[features.DOCUMENT]].split()
    assert first[features.CONTEXT] == " ".join(doc_words[:16])
    assert first[features.TARGET] == " ".join(doc_words[16:20])


# ------------------------------------------------------------------------- user files


def test_single_text_file_windows_exact(tmp_path):
    path = tmp_path / "book.txt"
    # Irregular whitespace is normalised to single spaces.
    path.write_text("\ufeff" + words(10) + "\n\n  " + " \t".join(f"w{i}" for i in range(10, 30)) + "\n",
                    encoding="utf-8")
    m = prepare_text_dataset(path, tmp_path / "cache", context_words=5, target_words=2, stride=3)
    rows = sorted(read_all(m), key=lambda r: r[features.EXAMPLE_ID])
    count = (30 - 7) // 3 + 1
    assert count == window_count(30, 5, 2, 3) == m.extra["document_windows"]["book.txt"]
    gap = m.extra["split"]["gap_windows_total"]
    assert m.num_examples == len(rows) == count - gap and gap == 2  # windows straddling train/eval dropped
    assert m.extra["documents"] == ["book.txt"] and m.extra["document_words"] == {"book.txt": 30}
    positions = ["start", "start", "start", "middle", "middle", "middle", "end", "end"]
    for row in rows:
        i = int(row[features.EXAMPLE_ID].rsplit("/", 1)[1])
        start = 3 * i
        assert row[features.CONTEXT] == " ".join(f"w{j}" for j in range(start, start + 5))
        assert row[features.TARGET] == " ".join(f"w{j}" for j in range(start + 5, start + 7))
        assert row[features.DOCUMENT] == "book.txt"
        assert row[features.EXAMPLE_ID] == f"book.txt/{i:05d}"
        assert row[features.POSITION] == positions[i]


def test_position_buckets_are_thirds():
    assert [position_bucket(i, 3) for i in range(3)] == ["start", "middle", "end"]
    assert [position_bucket(i, 1) for i in range(1)] == ["start"]
    assert window_count(6, 5, 2, 1) == 0 and window_count(7, 5, 2, 1) == 1


def test_folder_of_text_files(tmp_path):
    root = tmp_path / "corpus"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text(words(12, "a"), encoding="utf-8")
    (root / "sub" / "b.TXT").write_text(words(9, "b"), encoding="utf-8")
    (root / "notes.md").write_text("# Notes\n\n" + words(8, "n"), encoding="utf-8")
    (root / ".hidden.txt").write_text("\x00 hidden files are skipped", encoding="utf-8")
    m = prepare_text_dataset(root, tmp_path / "cache", context_words=4, target_words=2, stride=1)
    rows = read_all(m)
    assert m.extra["documents"] == ["a.txt", "notes.md", "sub/b.TXT"]
    # "Notes" is the heading's text: the "#" marker is dropped (data/text_markup.py).
    assert m.extra["document_words"] == {"a.txt": 12, "notes.md": 9, "sub/b.TXT": 9}
    assert m.extra["document_windows"] == {"a.txt": 7, "notes.md": 4, "sub/b.TXT": 4}
    assert len(rows) == m.num_examples == 15 - m.extra["split"]["gap_windows_total"]
    by_doc = {}
    for row in rows:
        by_doc.setdefault(row[features.DOCUMENT], []).append(row)
    assert by_doc["sub/b.TXT"][-1][features.TARGET] == "b7 b8"
    assert len({r[features.EXAMPLE_ID] for r in rows}) == len(rows)
    assert m.extra["corpus"] == {"documents": 3, "words": 30, "skipped": [], "guessed_encodings": []}


# ------------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("content,reason", [
    (b"GIF89a\x00\x01\x00binary", "binary"),
    (b"only three words", "short"),
    (b"   \n\t ", "empty"),
])
def test_unusable_file_in_folder_is_skipped_and_named(tmp_path, content, reason):
    root = tmp_path / "corpus"
    root.mkdir()
    for i in range(5):
        (root / f"good{i}.txt").write_text(words(60 + 10 * i), encoding="utf-8")
    (root / "bad.txt").write_bytes(content)
    m = prepare_text_dataset(root, tmp_path / "cache")
    assert "bad.txt" not in m.extra["documents"] and len(m.extra["documents"]) == 5
    (skip,) = m.extra["corpus"]["skipped"]
    assert (skip["document"], skip["reason"]) == ("bad.txt", reason)


def test_latin1_file_is_read_with_its_encoding_named(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "good.txt").write_text(words(200), encoding="utf-8")
    (root / "old.txt").write_bytes("caf\u00e9 au lait, cr\u00e8me br\u00fbl\u00e9e ".encode("latin-1") * 20)
    m = prepare_text_dataset(root, tmp_path / "cache")
    assert m.extra["corpus"]["guessed_encodings"] == [{"document": "old.txt", "encoding": "cp1252"}]
    texts = " ".join(r[features.CONTEXT] + " " + r[features.TARGET] for r in read_all(m))
    assert "cr\u00e8me br\u00fbl\u00e9e" in texts


def test_too_short_single_file_names_it(tmp_path):
    path = tmp_path / "short.txt"
    path.write_text(words(19), encoding="utf-8")
    with pytest.raises(DataError, match="no document is usable.*1 shorter than one window \\(short.txt\\)"):
        prepare_text_dataset(path, tmp_path / "cache")
    # One window fits, but nothing can be held out for evaluation: said before TFX starts.
    with pytest.raises(DataError, match="too short to hold out text.*at least 39 words"):
        prepare_text_dataset(path, tmp_path / "cache", context_words=15)


def test_missing_path_and_empty_corpus(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        prepare_text_dataset(tmp_path / "nope", tmp_path / "cache")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="leaves too little to train and evaluate: no document is usable"):
        prepare_text_dataset(empty, tmp_path / "cache")


def test_nothing_usable_is_one_paragraph_with_every_reason(tmp_path):
    root = tmp_path / "corpus"
    root.mkdir()
    (root / "a.txt").write_text(words(5))
    (root / "b.md").write_text("# " + words(3))
    (root / "c.txt").write_bytes(b"")
    (root / "d.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    (root / "e.dat").write_bytes(b"\x00" * 64)
    os.mkfifo(root / "f.txt")
    (root / "g.txt").symlink_to("g.txt")
    with pytest.raises(DataError) as info:
        prepare_text_dataset(root, tmp_path / "cache")
    message = str(info.value)
    assert "\n" not in message
    assert ("Of the 7 files found, 7 could not be used: 2 shorter than one window (a.txt, b.md), 1 empty "
            "(c.txt), 1 binary (e.dat), 1 other format (d.png), 1 not a regular file (f.txt), 1 symlink loop "
            "(g.txt).") in message


@pytest.mark.parametrize("kwargs", [{"context_words": 0}, {"target_words": -1},
                                    {"stride": True}, {"context_words": 2.5}])
def test_bad_window_settings(tmp_path, kwargs):
    with pytest.raises(DataError, match="is not valid"):
        prepare_text_dataset(None, tmp_path / "cache", **kwargs)


# ------------------------------------------------------------------------------ cache


def test_unchanged_source_reuses_cache_and_changes_rebuild(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(30), encoding="utf-8")
    cache = tmp_path / "cache"
    first = prepare_text_dataset(path, cache, context_words=4, target_words=1)
    before = mtimes(first.examples_dir)
    again = prepare_text_dataset(path, cache, context_words=4, target_words=1)
    assert again.examples_dir == first.examples_dir and again.fingerprint == first.fingerprint
    assert mtimes(again.examples_dir) == before  # not rewritten: TFX's input fingerprint holds
    restrided = prepare_text_dataset(path, cache, context_words=4, target_words=1, stride=1)
    assert restrided.examples_dir != first.examples_dir
    path.write_text(words(31), encoding="utf-8")
    edited = prepare_text_dataset(path, cache, context_words=4, target_words=1)
    assert edited.examples_dir != first.examples_dir
    assert edited.extra["document_words"] == {"doc.txt": 31}


def test_output_is_deterministic(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text(words(50), encoding="utf-8")
    a = prepare_text_dataset(path, tmp_path / "c1", context_words=6, target_words=2)
    b = prepare_text_dataset(path, tmp_path / "c2", context_words=6, target_words=2)
    assert a.fingerprint == b.fingerprint and a.files == b.files
    for name in a.files:
        assert (Path(a.examples_dir) / name).read_bytes() == (Path(b.examples_dir) / name).read_bytes()


@pytest.mark.parametrize("text, phrase", [
    ("spam " * 6000, "has only 1 distinct word ('spam') in 12k words over 2 documents"),
    ("the cat sat on the mat\n" * 1000, "has only 5 distinct words ('cat', 'mat', 'on', 'sat', 'the') in 12k words"),
])
def test_a_degenerate_corpus_is_refused_before_any_example_is_written(tmp_path, text, phrase):
    """Both readers (the prepare step and the ExampleGen's split decision) refuse a handful of words repeated."""
    from data.text_ingest import count, decide_split, list_documents

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(phrase) + ".*needs at least 10: it is judged on top-5"):
        prepare_text_dataset(corpus, tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").rglob("*.gz"))
    settings = {"context_words": 10, "target_words": 2, "stride": 3}
    refs, skipped = list_documents(str(corpus))
    with pytest.raises(DataError, match=re.escape(phrase)):
        decide_split([count(ref, settings) for ref in refs], skipped, settings, "text source x")


def test_ten_distinct_words_are_enough(tmp_path):
    """The floor is ten distinct words, counted over the whole corpus (each file alone has fewer)."""
    from data.text_ingest import count, decide_split, list_documents

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(" ".join(f"w{i % 5}" for i in range(3000)), encoding="utf-8")
    (corpus / "b.txt").write_text(" ".join(f"w{5 + i % 5}" for i in range(3000)), encoding="utf-8")
    settings = {"context_words": 10, "target_words": 2, "stride": 3}
    refs, skipped = list_documents(str(corpus))
    split, facts = decide_split([count(ref, settings) for ref in refs], skipped, settings, "text source x")
    assert facts.documents == 2 and sum(split.counts().values()) > 0
    (corpus / "b.txt").write_text(" ".join(f"w{4 + i % 5}" for i in range(3000)), encoding="utf-8")  # 9 in all
    with pytest.raises(DataError, match="has only 9 distinct words"):
        decide_split([count(ref, settings) for ref in list_documents(str(corpus))[0]], [], settings, "text source x")

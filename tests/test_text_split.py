"""Tests of data.text_split (pure) and of the split as data.text writes it (tiny corpora)."""
from __future__ import annotations

import pytest
import tensorflow as tf  # noqa: E402  (after the data package, which imports stackenv)

from data import text_features as features
from data import text_split
from data.text import prepare_text_dataset, window_count
from data.text_split import EVAL, TRAIN, gap_windows, split_corpus

SETTINGS = {"context_words": 16, "target_words": 4, "stride": 2}  # the defaults


def _windows_of(split, document, count):
    return {label: [i for i in range(count) if split.label(document, i) == label] for label in (TRAIN, EVAL)}


def _word_positions(indices, stride=2, span=20):
    return {w for i in indices for w in range(i * stride, i * stride + span)}


@pytest.mark.parametrize("count", [17, 40, 150, 1_000, 5_000, 40_000])
def test_one_document_holds_out_15_to_25_percent_without_shared_words(count):
    split = split_corpus({"book.txt": count}, gap_windows(**SETTINGS))
    assert split.method == "blocks"
    assert 0.15 <= split.eval_fraction <= 0.25
    windows = _windows_of(split, "book.txt", count)
    assert windows[TRAIN] and windows[EVAL]
    # No word of the document is in both a train window and an eval window.
    assert not _word_positions(windows[TRAIN]) & _word_positions(windows[EVAL])


def test_gap_is_exactly_the_windows_that_would_straddle():
    assert gap_windows(16, 4, 2) == 9      # window i and i+10 are the nearest without a shared word
    assert gap_windows(4, 1, 5) == 1       # no overlap at all: still one window apart
    split = split_corpus({"d": 2_000}, gap_windows(**SETTINGS))
    labels = [split.label("d", i) for i in range(2_000)]
    boundaries = [i for i in range(1, 2_000) if labels[i] is not None and labels[i - 1] is None]
    for i in boundaries:  # every run of dropped windows between two kept ones is 9 long
        run = 0
        while labels[i - 1 - run] is None:
            run += 1
        assert run == 9


def test_long_document_has_eval_blocks_in_every_third():
    count = 6_000
    split = split_corpus({"book": count}, gap_windows(**SETTINGS))
    eval_windows = _windows_of(split, "book", count)[EVAL]
    thirds = {3 * i // count for i in eval_windows}
    assert thirds == {0, 1, 2}


def test_appending_text_keeps_earlier_windows_in_their_split():
    gap = gap_windows(**SETTINGS)
    before = split_corpus({"book": 3_000}, gap)
    after = split_corpus({"book": 3_400}, gap)
    assert [before.label("book", i) for i in range(3_000)] == [after.label("book", i) for i in range(3_000)]


def test_many_documents_are_held_out_whole_in_a_fixed_order():
    counts = {f"doc{i:02d}": 100 + 37 * i for i in range(30)}
    split = split_corpus(counts, 9)
    assert split.method == "documents"
    assert 0.15 <= split.eval_fraction <= 0.25
    held = {d for d, s in split.documents.items() if s.whole == EVAL}
    assert len(held) >= text_split.MIN_EVAL_DOCUMENTS
    assert split_corpus(dict(reversed(counts.items())), 9) == split  # order of listing does not matter
    assert "whole documents" in split.describe()


@pytest.mark.parametrize("counts", [
    {"a": 900, "b": 700},                   # two documents: too few to hold out whole ones
    {"a": 900, "b": 700, "c": 60},          # three, uneven
    {"big": 20_000, "s1": 50, "s2": 40, "s3": 30, "s4": 20},  # one dominates: whole ones cannot give 15-25%
])
def test_few_or_uneven_documents_are_split_in_blocks(counts):
    split = split_corpus(counts, 9)
    assert split.method == "blocks", split.describe()
    assert 0.15 <= split.eval_fraction <= 0.25
    assert "blocks inside documents" in split.describe()


# ------------------------------------------------------------- as written by data.text


def _read(manifest, name):
    pattern = f"{manifest.examples_dir}/{manifest.extra['split_patterns'][name]}"
    spec = {k: tf.io.FixedLenFeature([], tf.string) for k in features.ALL_FEATURES}
    rows = []
    for record in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), compression_type="GZIP"):
        parsed = tf.io.parse_single_example(record, spec)
        rows.append({k: v.numpy().decode() for k, v in parsed.items()})
    return rows


@pytest.mark.parametrize("lengths", [[3_000], [1_800, 1_200], [1_500, 900, 400]])
def test_written_splits_hold_out_text_with_no_window_shared_or_straddling(tmp_path, lengths):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for n, length in enumerate(lengths):
        # Distinct words per document, so a shared word means a shared position in one document.
        (corpus / f"doc{n}.txt").write_text(" ".join(f"d{n}w{i}" for i in range(length)), encoding="utf-8")
    source = corpus / "doc0.txt" if len(lengths) == 1 else corpus
    m = prepare_text_dataset(source, tmp_path / "cache")
    train, evaluation = _read(m, TRAIN), _read(m, EVAL)
    assert train and evaluation and len(train) + len(evaluation) == m.num_examples
    assert 0.15 <= len(evaluation) / m.num_examples <= 0.25
    assert m.extra["split"]["method"] == "blocks"
    assert {r[features.DOCUMENT] for r in evaluation} == {f"doc{n}.txt" for n in range(len(lengths))}

    def words(rows):
        return {w for r in rows for w in (r[features.CONTEXT] + " " + r[features.TARGET]).split()}

    assert not words(train) & words(evaluation)
    assert not {r[features.EXAMPLE_ID] for r in train} & {r[features.EXAMPLE_ID] for r in evaluation}
    total = sum(window_count(length, **SETTINGS) for length in lengths)
    assert m.num_examples == total - m.extra["split"]["gap_windows_total"]

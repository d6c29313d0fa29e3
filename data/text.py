"""Turn a text source into cached TFRecords of windows (spec: ``data.text_features``).

The sources (CPython's bundled ``pydoc_data.topics`` by default, a text file, or a folder
of documents: .txt, .md, .rst, .html, compressed or not) are read by ``data.text_sources``;
files that yield no window are skipped and recorded (``data.text_corpus``). Each document is cut on
whitespace into windows of ``context_words`` words followed by ``target_words`` words, one
window every ``stride`` words. Which windows are held out for evaluation is decided here
(``data.text_split``): they are written as ``train-*`` and ``eval-*`` shards, the windows
straddling the two are dropped, and ExampleGen reads the two as its splits. As for images,
the result goes to ``<cache_root>/<fingerprint[:16]>/`` (see ``data.prepare``), so an
unchanged source is not converted again.
"""
from __future__ import annotations

import logging
import numbers
import os
from collections.abc import Iterator

import tensorflow as tf

from data import text_features as features
from data import text_split, walk
from data.errors import DataError
from data.manifest import DatasetManifest
from data.prepare import Conversion, prepare, shard_count
from data.text_corpus import MIN_DISTINCT_WORDS, CorpusFacts, first_distinct, too_few_words_error, too_little_error
from data.text_sources import FORMAT_VERSION, Corpus, plan_text_source  # noqa: F401  (re-exported)
from data.text_sources import Document as _Document
from data.tfrecords import SHARD_PATTERN

log = logging.getLogger(__name__)

DEFAULT_CONTEXT_WORDS = 16
DEFAULT_TARGET_WORDS = 4
# Stride 2 keeps the default corpus at ~32k windows: every word is still a target word
# (twice, at different offsets), at half the Transform and training cost of stride 1.
DEFAULT_STRIDE = 2
MAX_WINDOW_WORDS = 10_000
# Windows are tiny (~150 bytes); shards only matter for parallel Beam reads of big corpora.
_WINDOWS_PER_SHARD = 50_000


def prepare_text_dataset(
    source: str | os.PathLike | None,
    cache_root: str | os.PathLike,
    context_words: int = DEFAULT_CONTEXT_WORDS,
    target_words: int = DEFAULT_TARGET_WORDS,
    stride: int = DEFAULT_STRIDE,
    max_text_mb: int | None = None,
    follow_links: bool = False,
) -> DatasetManifest:
    """Window ``source`` into TFRecords under ``cache_root`` (or reuse them) and describe them.

    Args:
        source: a text file or a folder of documents, or None / "" for the bundled corpus.
        cache_root: where the TFRecords and their manifest go (reused when the source is unchanged).
        context_words, target_words: the words before and the words to continue of each window.
        stride: words between the starts of two windows.
        max_text_mb: refuse a corpus larger than this (None: the default limit).
        follow_links: read symbolic links inside the folder (never outside it).

    Returns:
        The manifest: kind ``"text"``, no image facts; ``extra`` holds the window settings and
        the documents with their word and window counts.

    Raises:
        DataError: any bad input, with one paragraph saying what, where and how to fix it.
    """
    context_words = _check_count("context_words", context_words, "--context-words 16")
    target_words = _check_count("target_words", target_words, "--target-words 4")
    stride = _check_count("stride", stride, "--stride 2")
    settings = {"context_words": context_words, "target_words": target_words, "stride": stride}
    plan = plan_text_source(source, settings, max_text_mb, follow_links)  # the budget is not in the cache key
    manifest, reused = prepare(plan, cache_root, "text", FORMAT_VERSION,
                               lambda corpus: _convert(corpus, plan.description, settings))
    log.info(
        "Text dataset from %s (%s): %d windows of %d+%d words (stride %d) from %d documents "
        "-> %s%s", plan.kind, plan.description, manifest.num_examples, context_words,
        target_words, stride, manifest.extra.get("num_documents", 0), manifest.examples_dir,
        " (cached)" if reused else "",
    )
    return manifest


def window_count(num_words: int, context_words: int, target_words: int, stride: int) -> int:
    """Windows of ``context_words + target_words`` words, starting every ``stride`` words."""
    span = context_words + target_words
    return 0 if num_words < span else (num_words - span) // stride + 1


def position_bucket(index: int, count: int) -> str:
    """Third of the document window ``index`` (of ``count``) falls in."""
    return features.POSITION_BUCKETS[min(2, 3 * index // max(1, count))]


def _check_count(name: str, value: object, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not (
            1 <= int(value) <= MAX_WINDOW_WORDS):
        raise DataError(
            f"{name} {value!r} is not valid: it must be a whole number of words between 1 "
            f"and {MAX_WINDOW_WORDS}. Pass e.g. {example}, or leave it out for the default."
        )
    return int(value)


# ----------------------------------------------------------------------------- output


def _convert(corpus: Corpus, description: str, settings: dict) -> Conversion:
    """The windows of ``corpus`` and the facts their manifest records."""
    documents = corpus.documents
    facts = CorpusFacts(len(documents), sum(len(d.words) for d in documents), corpus.skipped, corpus.guessed,
                        [d.doc_id for d in documents if walk.not_utf8(d.origin)])
    counts = {d.doc_id: window_count(len(d.words), **settings) for d in documents}
    distinct = first_distinct(word for d in documents for word in d.words)
    split = check_corpus(counts, {d.doc_id: len(d.words) for d in documents}, facts, settings, description,
                         distinct)
    split_counts = split.counts()
    return Conversion(
        examples=(),
        num_shards=0,
        splits={name: (_split_examples(documents, settings, split, name),
                       shard_count(split_counts[name], _WINDOWS_PER_SHARD)) for name in _SPLITS},
        extra={
            **settings,
            "split_feature": features.SPLIT_FEATURE,
            "split": split.to_json(),
            # ExampleGen reads these as its train/eval splits (pipeline/graph.py).
            "split_patterns": {name: f"{name}-{SHARD_PATTERN}" for name in _SPLITS},
            "num_documents": len(documents),
            "num_words": facts.words,
            "documents": [d.doc_id for d in documents],
            "document_words": {d.doc_id: len(d.words) for d in documents},
            "document_windows": counts,
            "corpus": facts.to_json(),
        },
    )


_SPLITS = (text_split.TRAIN, text_split.EVAL)


def check_corpus(window_counts: dict[str, int], word_counts: dict[str, int], facts: CorpusFacts,
                 settings: dict, description: str, distinct_words: frozenset[str]) -> text_split.CorpusSplit:
    """The split of the usable documents, or the one paragraph saying why too little is left
    (no usable document, none long enough to hold text out for evaluation, or a handful of distinct
    words: ``distinct_words`` holds up to ``MIN_DISTINCT_WORDS`` of them)."""
    if not window_counts:
        raise too_little_error(description, facts, settings, "no document is usable")
    if len(distinct_words) < MIN_DISTINCT_WORDS:
        raise too_few_words_error(description, facts, distinct_words)
    split = text_split.split_corpus(dict(sorted(window_counts.items())), text_split.gap_windows(**settings))
    counts = split.counts()
    if not counts[text_split.TRAIN] or not counts[text_split.EVAL]:
        span = settings["context_words"] + settings["target_words"]
        needed = span + (split.gap + 1) * settings["stride"]  # a train window, a gap, an eval window
        usable = f"{len(window_counts)} usable document{'s' if len(window_counts) > 1 else ''}"
        raise too_little_error(
            description, facts, settings,
            f"the corpus is too short to hold out text for evaluation: of its {usable}, the longest has "
            f"{max(word_counts.values())} words, and a document needs at least {needed} words (windows of "
            f"{span} words; those overlapping both splits are dropped; a few thousand words make a "
            "meaningful evaluation)")
    return split


def _split_examples(documents: list[_Document], settings: dict, split: text_split.CorpusSplit,
                    name: str) -> Iterator[tf.train.Example]:
    """The windows of split ``name``; gap windows belong to neither split and are dropped."""
    labels = (split.label(d.doc_id, i) for d in documents for i in range(window_count(len(d.words), **settings)))
    return (example for example, label in zip(_examples(documents, **settings), labels) if label == name)


def _examples(documents: list[_Document], context_words: int, target_words: int,
              stride: int) -> Iterator[tf.train.Example]:
    for doc in documents:
        count = window_count(len(doc.words), context_words, target_words, stride)
        for index in range(count):
            start = index * stride
            middle = start + context_words
            yield make_example(
                context=" ".join(doc.words[start:middle]),
                target=" ".join(doc.words[middle:middle + target_words]),
                document=doc.doc_id,
                position=position_bucket(index, count),
                example_id=f"{doc.doc_id}/{index:05d}",
            )


def make_example(context: str, target: str, document: str, position: str,
                 example_id: str) -> tf.train.Example:
    """One tf.train.Example in the spec of ``data.text_features``."""
    def text(value: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    return tf.train.Example(features=tf.train.Features(feature={
        features.CONTEXT: text(context),
        features.TARGET: text(target),
        features.DOCUMENT: text(document),
        features.POSITION: text(position),
        features.EXAMPLE_ID: text(example_id),
    }))

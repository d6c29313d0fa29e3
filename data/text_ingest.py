"""Text sources as units of work for a Beam pipeline: one document per unit.

The prepare step (``data.text``) reads a corpus in one process; the text ExampleGen
(``components/text_example_gen.py``) lists documents here by name only (through
``data.walk``: ``tf.io.gfile`` for ``gs://`` / ``s3://``, nothing opened), reads each
document on a Beam worker with the same reader (``data.text_sources.read_document``) and
windowing as ``data.text``, and decides the split with the same ``data.text.check_corpus``
from the counts of all documents (a Beam combiner), so both paths put every window in the
same split and skip the same files for the same reasons.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator

import tensorflow as tf

from data import text, text_split, walk
from data.errors import DataError
from data.text_corpus import CorpusFacts, Guessed, Skip, first_distinct
from data.text_files import list_text_files
from data.text_sources import Document, read_document

#: ``input_base`` of the bundled corpus (CPython's pydoc topics): nothing machine-specific in the spec.
BUNDLED_TOPICS = "bundled:pydoc-topics"


@dataclasses.dataclass(frozen=True)
class DocumentRef:
    doc_id: str
    uri: str  # "" for a bundled topic


@dataclasses.dataclass(frozen=True)
class Counted:
    """What the counting pass learns of one document: its counts, or why it is not used."""

    doc_id: str
    windows: int = 0
    words: int = 0
    skip: Skip | None = None
    guessed_encoding: str = ""
    distinct: frozenset[str] = frozenset()  # up to text_corpus.MIN_DISTINCT_WORDS of its words
    not_utf8: bool = False  # read under a file name that is not UTF-8 (named in the summary)


def list_documents(root: str) -> tuple[list[DocumentRef], list[Skip]]:
    """The candidate documents of a text source by name only, and the entries skipped unopened."""
    if root == BUNDLED_TOPICS:
        from pydoc_data.topics import topics

        return [DocumentRef(name, "") for name in sorted(topics)], []
    if not tf.io.gfile.exists(root) and not (not walk.is_uri(root) and os.path.islink(root)):
        raise DataError(
            f"Text source {root} does not exist. Give a text file, a folder of documents (.txt, .md, "
            ".rst, .html, also compressed), or leave the source out to use the bundled Python "
            "documentation topics."
        )
    is_folder = tf.io.gfile.isdir(root)
    files, skipped = list_text_files(root, is_folder)
    return [DocumentRef(f.relative, f.uri) for f in files], skipped


def read(ref: DocumentRef, settings: dict) -> tuple[Document, str] | Skip:
    """``(document, guessed encoding or "")``, or why the document is not used."""
    span = settings["context_words"] + settings["target_words"]
    if not ref.uri:
        from pydoc_data.topics import topics

        words = topics[ref.doc_id].split()
        if len(words) < span:
            return Skip(ref.doc_id, "short", f"{len(words)} words")
        return Document(ref.doc_id, words, f"pydoc topic {ref.doc_id!r}"), ""
    return read_document(ref.doc_id, ref.uri, span)


def count(ref: DocumentRef, settings: dict) -> Counted:
    outcome = read(ref, settings)
    if isinstance(outcome, Skip):
        return Counted(ref.doc_id, skip=outcome)
    document, guessed = outcome
    return Counted(ref.doc_id, text.window_count(len(document.words), **settings), len(document.words),
                   guessed_encoding=guessed, distinct=first_distinct(document.words),
                   not_utf8=walk.not_utf8(ref.uri))


def decide_split(counted: list[Counted], listed_skips: list[Skip], settings: dict, description: str
                 ) -> tuple[text_split.CorpusSplit, CorpusFacts]:
    """The split of the whole corpus and its facts, or the prepare step's paragraph for too little."""
    used = sorted((c for c in counted if c.skip is None), key=lambda c: c.doc_id)
    facts = CorpusFacts(len(used), sum(c.words for c in used),
                        list(listed_skips) + [c.skip for c in counted if c.skip is not None],
                        [Guessed(c.doc_id, c.guessed_encoding) for c in used if c.guessed_encoding],
                        [c.doc_id for c in used if c.not_utf8])
    distinct = first_distinct(word for c in used for word in sorted(c.distinct))
    split = text.check_corpus({c.doc_id: c.windows for c in used}, {c.doc_id: c.words for c in used}, facts,
                              settings, description, distinct)
    return split, facts


def split_windows(ref: DocumentRef, settings: dict, split: text_split.CorpusSplit
                  ) -> Iterator[tuple[str, tf.train.Example]]:
    """``(split name, example)`` for each window of the document kept by ``split`` (gaps dropped);
    nothing for a document the counting pass did not use."""
    if ref.doc_id not in split.documents:
        return
    outcome = read(ref, settings)
    if isinstance(outcome, Skip):
        return
    document = outcome[0]
    for index, example in enumerate(text._examples([document], **settings)):
        label = split.label(document.doc_id, index)
        if label is not None:
            yield label, example

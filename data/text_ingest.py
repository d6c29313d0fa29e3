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

from stackenv import progress

import tensorflow as tf

from data import text, text_split, walk
from data.errors import DataError
from data.text_corpus import MIB, CorpusFacts, Guessed, Skip, first_distinct, over_budget_error
from data.text_decode import MAX_TEXT_BYTES
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
    text_bytes: int = 0     # bytes of text once decompressed (the corpus budget, --max-text-mb)


def list_documents(root: str, follow_links: bool = False) -> tuple[list[DocumentRef], list[Skip]]:
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
    files, skipped = list_text_files(root, is_folder, follow_links)
    return [DocumentRef(f.relative, f.uri) for f in files], skipped


def read(ref: DocumentRef, settings: dict, limit: int = MAX_TEXT_BYTES) -> tuple[Document, str] | Skip:
    """``(document, guessed encoding or "")``, or why the document is not used; ``limit``: the most bytes of
    text the file may hold once decompressed."""
    span = settings["context_words"] + settings["target_words"]
    if not ref.uri:
        from pydoc_data.topics import topics

        words = topics[ref.doc_id].split()
        if len(words) < span:
            return Skip(ref.doc_id, "short", f"{len(words)} words")
        return Document(ref.doc_id, words, f"pydoc topic {ref.doc_id!r}"), ""
    return read_document(ref.doc_id, ref.uri, span, limit)


#: The progress counter of the counting pass (the runner's live line: documents read of how many).
DOCUMENTS_READ = "documents read"
#: The counter of the pass that makes the windows (after the counting pass: minutes on a large corpus).
WINDOWS_MADE = "windows made"


def count(ref: DocumentRef, settings: dict, max_text_mb: int | None = None, documents: int | None = None
          ) -> Counted:
    """One document's counts; ``max_text_mb``: the corpus budget (no single file may hold more text),
    ``documents``: how many the source holds (the progress line's total)."""
    outcome = read(ref, settings, max_text_mb * MIB if max_text_mb else MAX_TEXT_BYTES)
    progress.count(DOCUMENTS_READ, 1, total=documents)
    if isinstance(outcome, Skip):
        return Counted(ref.doc_id, skip=outcome)
    document, guessed = outcome
    return Counted(ref.doc_id, text.window_count(len(document.words), **settings), len(document.words),
                   guessed_encoding=guessed, distinct=first_distinct(document.words),
                   not_utf8=walk.not_utf8(ref.uri), text_bytes=document.text_bytes)


def check_budget(counted: list[Counted], max_text_mb: int | None, description: str) -> None:
    """DataError when the corpus holds more decompressed text than ``--max-text-mb`` (all files together, or
    one file alone), naming the largest file."""
    if not max_text_mb:
        return
    total = sum(c.text_bytes for c in counted)
    alone = [c for c in counted if c.skip is not None and c.skip.reason == "too_large" and
             "--max-text-mb" in c.skip.detail]
    if total <= max_text_mb * MIB and not alone:
        return
    largest = alone[0].doc_id if alone else max(counted, key=lambda c: c.text_bytes).doc_id
    raise over_budget_error(description, largest + (" (alone)" if alone else " (the largest)"), total,
                            max_text_mb, len(counted), len(counted))


def decide_split(counted: list[Counted], listed_skips: list[Skip], settings: dict, description: str,
                 max_text_mb: int | None = None) -> tuple[text_split.CorpusSplit, CorpusFacts]:
    """The split of the whole corpus and its facts, or the prepare step's paragraph for too little
    (or for more text than ``--max-text-mb``)."""
    check_budget(counted, max_text_mb, description)
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
    made = 0
    for index, example in enumerate(text._examples([document], **settings)):
        label = split.label(document.doc_id, index)
        if label is not None:
            made += 1
            yield label, example
    progress.count(WINDOWS_MADE, made, total=split.kept_windows)

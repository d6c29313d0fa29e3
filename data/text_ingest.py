"""Text sources as units of work for a Beam pipeline: one document per unit.

The prepare step (``data.text``) reads a corpus in one process; the text ExampleGen
(``components/text_example_gen.py``) lists documents here by name only (through
``tf.io.gfile``, so ``gs://`` folders work), reads each document on a Beam worker with the
same reader and windowing as ``data.text``, and decides the split with the same
``data.text_split`` rule from the window counts of all documents (a Beam combiner), so both
paths put every window in the same split.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import tensorflow as tf

from data import text, text_split
from data.errors import DataError
from data.images.listing import find_files
from data.text_sources import TEXT_SUFFIX, Document, _read_text, too_short

#: ``input_base`` of the bundled corpus (CPython's pydoc topics): nothing machine-specific in the spec.
BUNDLED_TOPICS = "bundled:pydoc-topics"


@dataclasses.dataclass(frozen=True)
class DocumentRef:
    doc_id: str
    uri: str  # "" for a bundled topic


def list_documents(root: str) -> list[DocumentRef]:
    """The documents of a text source, by name only; DataError as the prepare step raises it."""
    if root == BUNDLED_TOPICS:
        from pydoc_data.topics import topics

        return [DocumentRef(name, "") for name in sorted(topics)]
    if not tf.io.gfile.exists(root):
        raise DataError(
            f"Text source {root} does not exist. Give a UTF-8 text file, a folder of .txt "
            "files (one document per file), or leave the source out to use the bundled "
            "Python documentation topics."
        )
    if not tf.io.gfile.isdir(root):
        return [DocumentRef(root.rstrip("/").rsplit("/", 1)[-1], root)]
    files = find_files(root, (TEXT_SUFFIX,))
    if not files:
        raise DataError(
            f"Text folder {root} holds no {TEXT_SUFFIX} files, so the corpus is empty. Put "
            f"one UTF-8 {TEXT_SUFFIX} file per document in it (sub-folders are searched too)."
        )
    prefix = len(root.rstrip("/")) + 1
    return [DocumentRef(path[prefix:], path) for path in files]


def read_document(ref: DocumentRef, settings: dict) -> Document | None:
    """The document's words; None for a bundled topic shorter than one window (skipped, as in
    ``data.text_sources``), DataError for such a user file."""
    span = settings["context_words"] + settings["target_words"]
    if not ref.uri:
        from pydoc_data.topics import topics

        words = topics[ref.doc_id].split()
        return Document(ref.doc_id, words, f"pydoc topic {ref.doc_id!r}") if len(words) >= span else None
    words = _read_text(ref.uri).split()
    if len(words) < span:
        raise too_short(ref.uri, len(words), settings)
    return Document(ref.doc_id, words, ref.uri)


def decide_split(counts: list[tuple[str, int, int]], settings: dict, description: str
                 ) -> text_split.CorpusSplit:
    """The split of the whole corpus from ``(doc_id, windows, words)`` per document."""
    if not counts:
        raise DataError(
            f"No document in {description} is long enough for one window of "
            f"{settings['context_words'] + settings['target_words']} words. Lower "
            "--context-words / --target-words."
        )
    split = text_split.split_corpus({doc: windows for doc, windows, _ in sorted(counts)},
                                    text_split.gap_windows(**settings))
    text._check_split([words for _, _, words in counts], settings, split)
    return split


def split_windows(document: Document, settings: dict, split: text_split.CorpusSplit
                  ) -> Iterator[tuple[str, tf.train.Example]]:
    """``(split name, example)`` for each window of ``document`` kept by ``split`` (gaps dropped)."""
    for index, example in enumerate(text._examples([document], **settings)):
        label = split.label(document.doc_id, index)
        if label is not None:
            yield label, example

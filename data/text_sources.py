"""Text source readers: which documents a text source holds, as a cheap plan.

Supported sources, detected from the path:

* ``None`` (or ``""``): CPython's own ``pydoc_data.topics`` (the prose of ``help()``
  topics), shipped with every CPython, so no download;
* a file: one document, its id is the file name;
* a folder: every document file below it (recursively, hidden entries skipped) is one
  document, its id is the path relative to the folder. Which files are documents, how
  their text is extracted and decoded: ``data.text_files``.

A file that yields no window (empty, shorter than one window, binary, another format,
unreadable, a fifo or a symlink loop) is skipped and recorded (``data.text_corpus``), never
an error on its own. Windowing and writing are in ``data.text``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
from pathlib import Path

from data import walk
from data.errors import DataError
from data.prepare import SourcePlan, source_fingerprint
from data.text_corpus import MIB, Guessed, Skip, over_budget_error
from data.text_decode import MAX_TEXT_BYTES, Unusable
from data.text_files import kind_of, list_text_files, read_words
from data.text_markup import PLAIN

log = logging.getLogger(__name__)

# Bump when the conversion changes in a way that changes the output for the same input
# (it is part of every fingerprint). 2: the manifest has no image fields.
# 3: train/eval decided in data/text.py (data/text_split.py), gap windows dropped.
FORMAT_VERSION = 4  # 4: Markdown/reST/HTML prose, compressed files, legacy encodings (data/text_files.py)


@dataclasses.dataclass
class Document:
    doc_id: str
    words: list[str]
    origin: str  # what to name in messages: a file path or the topic name
    text_bytes: int = 0  # bytes of text once decompressed (counted against --max-text-mb)


@dataclasses.dataclass
class Corpus:
    """A loaded text source: its documents, the files not used, the encodings guessed."""

    documents: list[Document]
    skipped: list[Skip]
    guessed: list[Guessed] = dataclasses.field(default_factory=list)


def plan_text_source(source: str | os.PathLike | None, settings: dict,
                     max_text_mb: int | None = None, follow_links: bool = False) -> SourcePlan[Corpus]:
    """How to read ``source``; ``max_text_mb``: the corpus budget of decompressed text (None: no budget);
    ``follow_links``: read what symbolic links leaving the folder point to (``--follow-links``)."""
    if source is None or not str(source).strip():
        return _plan_topics(settings)
    root = str(source)
    if not walk.is_uri(root):
        root = str(Path(root).expanduser().resolve())
    import tensorflow as tf

    if not tf.io.gfile.exists(root) and not os.path.islink(root):
        raise DataError(
            f"Text source {root} does not exist. Give a text file, a folder of documents (.txt, .md, "
            ".rst, .html, also compressed), or leave the source out to use the bundled Python "
            "documentation topics."
        )
    return _plan_files(root, tf.io.gfile.isdir(root), settings, max_text_mb, follow_links)


def _plan_topics(settings: dict) -> SourcePlan[Corpus]:
    from pydoc_data.topics import topics

    content = hashlib.sha256(json.dumps(topics, sort_keys=True).encode()).hexdigest()
    version = ".".join(map(str, sys.version_info[:3]))
    span = settings["context_words"] + settings["target_words"]

    def load(scratch: Path) -> Corpus:
        # Topics shorter than one window are skipped (the bundled corpus is not the user's
        # to fix); user files are checked strictly instead.
        docs = [Document(name, topics[name].split(), f"pydoc topic {name!r}")
                for name in sorted(topics)]
        skipped = [Skip(d.doc_id, "short", f"{len(d.words)} words") for d in docs if len(d.words) < span]
        return Corpus([d for d in docs if len(d.words) >= span], skipped)

    return SourcePlan(
        kind="pydoc-topics",
        description=f"CPython {version} pydoc_data.topics",
        fingerprint=source_fingerprint(FORMAT_VERSION, "pydoc-topics", content=content, **settings),
        load=load,
        extra={"python_version": version},
    )


# ----------------------------------------------------------------------- user files


def _plan_files(root: str, is_folder: bool, settings: dict, max_text_mb: int | None = None,
                follow_links: bool = False) -> SourcePlan[Corpus]:
    span = settings["context_words"] + settings["target_words"]
    files, listed_skips = list_text_files(root, is_folder, follow_links)
    budget = max_text_mb * MIB if max_text_mb else None

    def load(scratch: Path) -> Corpus:
        docs, skipped, guessed, total = [], list(listed_skips), [], 0
        for done, file in enumerate(files, 1):
            left = MAX_TEXT_BYTES if budget is None else budget - total
            read = read_document(file.relative, file.uri, span, max(left, 0))
            if budget is not None and (total + _size(read) > budget or (
                    isinstance(read, Skip) and read.reason == "too_large" and left < MAX_TEXT_BYTES)):
                raise over_budget_error(f"{'folder' if is_folder else 'file'} {root}", file.relative, total,
                                        max_text_mb or 0, done, len(files))
            total += _size(read)
            if done % 100 == 0 or done == len(files):
                log.info("Text read: %d of %d files, %d MiB of text", done, len(files), total // MIB)
            if isinstance(read, Skip):
                skipped.append(read)
                continue
            document, encoding = read
            docs.append(document)
            if encoding:
                guessed.append(Guessed(document.doc_id, encoding))
        for skip in skipped:
            log.info("Not used: %s (%s: %s)", skip.document, skip.reason, skip.detail)
        return Corpus(docs, skipped, guessed)

    kind = "text-folder" if is_folder else "text-file"
    stats = [(f.relative, f.size, f.mtime_ns) for f in files] + [(s.document, s.reason) for s in listed_skips]
    return SourcePlan(
        kind=kind,
        description=f"{'folder of text files' if is_folder else 'text file'} {root}",
        fingerprint=source_fingerprint(FORMAT_VERSION, kind, root=root, files=stats, **settings),
        load=load,
        extra={"source_path": root},
    )


def read_document(doc_id: str, uri: str, span: int, limit: int = MAX_TEXT_BYTES) -> tuple[Document, str] | Skip:
    """``(document, guessed encoding or "")`` for a file with at least one window of ``span``
    words, else why it is skipped. The prepare step and the ExampleGen both read through here.
    ``limit``: the most bytes of text the file may hold once decompressed."""
    read = read_words(uri, doc_id.rsplit("/", 1)[-1], limit)
    if isinstance(read, Unusable):
        return Skip(doc_id, read.reason, read.detail)
    if not read.words:
        return Skip(doc_id, "empty", "no words" + (" outside the markup" if _is_markup(doc_id) else ""))
    if len(read.words) < span:
        return Skip(doc_id, "short", f"{len(read.words)} words, a window needs {span}")
    return Document(doc_id, read.words, uri, read.size), read.encoding if read.guessed else ""


def _size(read: tuple[Document, str] | Skip) -> int:
    return read[0].text_bytes if isinstance(read, tuple) else 0


def _is_markup(name: str) -> bool:
    return kind_of(name) not in (PLAIN, None)

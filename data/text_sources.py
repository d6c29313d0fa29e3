"""Text source readers: which documents a text source holds, as a cheap plan.

Supported sources, detected from the path:

* ``None`` (or ``""``): CPython's own ``pydoc_data.topics`` (the prose of ``help()``
  topics), shipped with every CPython, so no download;
* a text file (any name): one document, its id is the file name;
* a folder: every ``*.txt`` file below it (recursively, hidden ones skipped) is one
  document, its id is the path relative to the folder.

Files must be UTF-8 text (a BOM is allowed). Windowing and writing are in ``data.text``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import sys
from pathlib import Path

from data.errors import DataError
from data.prepare import SourcePlan, file_stats, find_files, source_fingerprint

log = logging.getLogger(__name__)

# Bump when the conversion changes in a way that changes the output for the same input
# (it is part of every fingerprint). 2: the manifest has no image fields.
FORMAT_VERSION = 3  # 3: train/eval decided in data/text.py (data/text_split.py), gap windows dropped
TEXT_SUFFIX = ".txt"


@dataclasses.dataclass
class Document:
    doc_id: str
    words: list[str]
    origin: str  # what to name in messages: a file path or the topic name


@dataclasses.dataclass
class Corpus:
    """A loaded text source: its documents and the ids skipped as shorter than one window."""

    documents: list[Document]
    skipped: list[str]


def plan_text_source(source: str | os.PathLike | None, settings: dict) -> SourcePlan[Corpus]:
    if source is None or not str(source).strip():
        return _plan_topics(settings)
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(
            f"Text source {path} does not exist. Give a UTF-8 text file, a folder of .txt "
            "files (one document per file), or leave the source out to use the bundled "
            "Python documentation topics."
        )
    path = path.resolve()
    if path.is_file():
        return _plan_files(path, [path], settings)
    if not path.is_dir():
        raise DataError(
            f"Text source {path} is neither a regular file nor a folder. Pass a UTF-8 text "
            "file or a folder of .txt files."
        )
    files = _find_text_files(path)
    if not files:
        raise DataError(
            f"Text folder {path} holds no {TEXT_SUFFIX} files, so the corpus is empty. Put "
            f"one UTF-8 {TEXT_SUFFIX} file per document in it (sub-folders are searched too)."
        )
    return _plan_files(path, files, settings)


def _find_text_files(root: Path) -> list[Path]:
    found, ignored = find_files(root, (TEXT_SUFFIX,))
    if ignored:
        log.info("Ignored %d files without the %s suffix in %s", ignored, TEXT_SUFFIX, root)
    return found


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
        skipped = [d.doc_id for d in docs if len(d.words) < span]
        return Corpus([d for d in docs if len(d.words) >= span], skipped)

    return SourcePlan(
        kind="pydoc-topics",
        description=f"CPython {version} pydoc_data.topics",
        fingerprint=source_fingerprint(FORMAT_VERSION, "pydoc-topics", content=content, **settings),
        load=load,
        extra={"python_version": version},
    )


# ----------------------------------------------------------------------- user files


def _plan_files(root: Path, files: list[Path], settings: dict) -> SourcePlan[Corpus]:
    base = root if root.is_dir() else root.parent
    span = settings["context_words"] + settings["target_words"]

    def load(scratch: Path) -> Corpus:
        docs = []
        for path in files:
            words = _read_text(path).split()
            if len(words) < span:
                raise too_short(path, len(words), settings)
            docs.append(Document(path.relative_to(base).as_posix(), words, str(path)))
        return Corpus(docs, [])

    kind = "text-folder" if root.is_dir() else "text-file"
    return SourcePlan(
        kind=kind,
        description=f"{'folder of text files' if root.is_dir() else 'text file'} {root}",
        fingerprint=source_fingerprint(FORMAT_VERSION, kind, root=str(root),
                                       files=file_stats(files, base), **settings),
        load=load,
        extra={"source_path": str(root)},
    )


def too_short(path: Path | str, words: int, settings: dict) -> DataError:
    """The paragraph for a user's text file shorter than one context + target window."""
    what = "is empty" if not words else f"has only {words} words"
    return DataError(
        f"Text file {path} {what}, too few for one window of {settings['context_words']} "
        f"context + {settings['target_words']} target words "
        f"({settings['context_words'] + settings['target_words']} words). Remove or merge the "
        "file, or lower --context-words / --target-words.")


def _read_text(path: Path | str) -> str:
    """The file's text (a local path or a ``tf.io.gfile`` URI); DataError for unreadable,
    binary or non-UTF-8 files."""
    import tensorflow as tf

    name = os.path.basename(str(path))
    try:
        with tf.io.gfile.GFile(str(path), "rb") as handle:
            data = handle.read()
    except (OSError, tf.errors.OpError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else exc.message
        raise DataError(
            f"Cannot read text file {path} ({reason}). Check that it exists and is "
            "readable by the user running the pipeline."
        ) from exc
    if b"\x00" in data:
        raise DataError(
            f"File {path} looks binary (it contains NUL bytes), not UTF-8 text. Remove it "
            "from the text folder; UTF-16 text must be converted to UTF-8 first (e.g. "
            f"iconv -f UTF-16 -t UTF-8 {name})."
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"Text file {path} is not valid UTF-8 (byte {exc.start}: {exc.reason}). Convert "
            f"it to UTF-8, e.g. iconv -f LATIN1 -t UTF-8 {name} > converted.txt, if it "
            "is Latin-1."
        ) from exc


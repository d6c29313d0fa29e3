"""Turn a text source into cached TFRecords of windows (spec: ``data.text_features``).

Supported sources, detected from the path:

* ``None`` (or ``""``): CPython's own ``pydoc_data.topics`` (the prose of ``help()``
  topics, ~79 documents, ~65k words), shipped with every CPython, so no download;
* a text file (any name): one document, its id is the file name;
* a folder: every ``*.txt`` file below it (recursively, hidden ones skipped) is one
  document, its id is the path relative to the folder.

Files must be UTF-8 text (a BOM is allowed). Each document is cut on whitespace into
windows of ``context_words`` words followed by ``target_words`` words, one window every
``stride`` words. Which windows are held out for evaluation is decided here
(``data.text_split``): they are written as ``train-*`` and ``eval-*`` shards, the windows
straddling the two are dropped, and ExampleGen reads the two as its splits. As for
images, the result goes to ``<cache_root>/<fingerprint[:16]>/`` (see ``data.tfrecords``),
so an unchanged source is not converted again.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import numbers
import os
import sys
from pathlib import Path
from typing import Callable, Iterator

import tensorflow as tf

from data import text_features as features
from data import text_split
from data.errors import DataError
from data.tfrecords import SHARD_PATTERN, DatasetManifest, build_cached, file_stats, source_fingerprint, write_examples

log = logging.getLogger(__name__)

# Bump when the conversion changes in a way that changes the output for the same input.
FORMAT_VERSION = 2  # 2: train/eval decided here (data/text_split.py), gap windows dropped
DEFAULT_CONTEXT_WORDS = 16
DEFAULT_TARGET_WORDS = 4
# Stride 2 keeps the default corpus at ~32k windows: every word is still a target word
# (twice, at different offsets), at half the Transform and training cost of stride 1.
DEFAULT_STRIDE = 2
MAX_WINDOW_WORDS = 10_000
TEXT_SUFFIX = ".txt"
# Windows are tiny (~150 bytes); shards only matter for parallel Beam reads of big corpora.
_WINDOWS_PER_SHARD = 50_000
_MAX_SHARDS = 64


@dataclasses.dataclass
class _Document:
    doc_id: str
    words: list[str]
    origin: str  # what to name in messages: a file path or the topic name


@dataclasses.dataclass
class _Plan:
    """A detected source: cheap to make (listing + stat only), so cache hits stay cheap."""

    kind: str
    description: str
    fingerprint: str
    load: Callable[[], tuple[list[_Document], list[str]]]  # -> (documents, skipped ids)
    extra: dict = dataclasses.field(default_factory=dict)


def prepare_text_dataset(
    source: str | os.PathLike | None,
    cache_root: str | os.PathLike,
    context_words: int = DEFAULT_CONTEXT_WORDS,
    target_words: int = DEFAULT_TARGET_WORDS,
    stride: int = DEFAULT_STRIDE,
) -> DatasetManifest:
    """Window ``source`` into TFRecords under ``cache_root`` (or reuse them) and describe them.

    The manifest has kind ``"text"``, no classes and no image shape; ``extra`` holds the
    window settings and the documents with their word and window counts.
    Raises DataError with an actionable message for any bad input.
    """
    context_words = _check_count("context_words", context_words, "--context-words 16")
    target_words = _check_count("target_words", target_words, "--target-words 4")
    stride = _check_count("stride", stride, "--stride 2")
    settings = {"context_words": context_words, "target_words": target_words, "stride": stride}
    plan = _plan(source, settings)
    manifest, reused = build_cached(
        cache_root, plan.fingerprint, lambda staging: _build(plan, settings, staging)
    )
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


def example_gen_split(document: str, train_buckets: int = 4, eval_buckets: int = 1) -> str:
    """``"train"`` or ``"eval"``: where TFX ExampleGen's hash split puts this document.

    Reproduces ExampleGen's partition on ``SPLIT_FEATURE`` (sha256 of the serialized
    feature modulo the bucket total), so experiments can use the pipeline's exact split.
    """
    feature = tf.train.Feature(bytes_list=tf.train.BytesList(value=[document.encode("utf-8")]))
    digest = hashlib.sha256(feature.SerializeToString(deterministic=True)).hexdigest()
    return "train" if int(digest, 16) % (train_buckets + eval_buckets) < train_buckets else "eval"


def _check_count(name: str, value: object, example: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not (
            1 <= value <= MAX_WINDOW_WORDS):
        raise DataError(
            f"{name} {value!r} is not valid: it must be a whole number of words between 1 "
            f"and {MAX_WINDOW_WORDS}. Pass e.g. {example}, or leave it out for the default."
        )
    return int(value)




# ------------------------------------------------------------------ source detection


def _plan(source: str | os.PathLike | None, settings: dict) -> _Plan:
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
    found, ignored = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            if name.lower().endswith(TEXT_SUFFIX):
                found.append(Path(dirpath) / name)
            else:
                ignored += 1
    if ignored:
        log.info("Ignored %d files without the %s suffix in %s", ignored, TEXT_SUFFIX, root)
    return found




# ------------------------------------------------------------------- default corpus


def _plan_topics(settings: dict) -> _Plan:
    from pydoc_data.topics import topics

    content = hashlib.sha256(json.dumps(topics, sort_keys=True).encode()).hexdigest()
    version = ".".join(map(str, sys.version_info[:3]))
    span = settings["context_words"] + settings["target_words"]

    def load() -> tuple[list[_Document], list[str]]:
        # Topics shorter than one window are skipped (the bundled corpus is not the user's
        # to fix); user files are checked strictly instead.
        docs = [_Document(name, topics[name].split(), f"pydoc topic {name!r}")
                for name in sorted(topics)]
        skipped = [d.doc_id for d in docs if len(d.words) < span]
        return [d for d in docs if len(d.words) >= span], skipped

    return _Plan(
        kind="pydoc-topics",
        description=f"CPython {version} pydoc_data.topics",
        fingerprint=source_fingerprint(FORMAT_VERSION, "pydoc-topics", content=content, **settings),
        load=load,
        extra={"python_version": version},
    )


# ----------------------------------------------------------------------- user files


def _plan_files(root: Path, files: list[Path], settings: dict) -> _Plan:
    base = root if root.is_dir() else root.parent
    span = settings["context_words"] + settings["target_words"]

    def load() -> tuple[list[_Document], list[str]]:
        docs = []
        for path in files:
            words = _read_text(path).split()
            if len(words) < span:
                what = "is empty" if not words else f"has only {len(words)} words"
                raise DataError(
                    f"Text file {path} {what}, too few for one window of "
                    f"{settings['context_words']} context + {settings['target_words']} target "
                    f"words ({span} words). Remove or merge the file, or lower "
                    "--context-words / --target-words."
                )
            docs.append(_Document(path.relative_to(base).as_posix(), words, str(path)))
        return docs, []

    kind = "text-folder" if root.is_dir() else "text-file"
    return _Plan(
        kind=kind,
        description=f"{'folder of text files' if root.is_dir() else 'text file'} {root}",
        fingerprint=source_fingerprint(FORMAT_VERSION, kind, root=str(root),
                                       files=file_stats(files, base), **settings),
        load=load,
        extra={"source_path": str(root)},
    )


def _read_text(path: Path) -> str:
    """The file's text; DataError for unreadable, binary or non-UTF-8 files."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(
            f"Cannot read text file {path} ({exc.strerror}). Check that it exists and is "
            "readable by the user running the pipeline."
        ) from exc
    if b"\x00" in data:
        raise DataError(
            f"File {path} looks binary (it contains NUL bytes), not UTF-8 text. Remove it "
            "from the text folder; UTF-16 text must be converted to UTF-8 first (e.g. "
            f"iconv -f UTF-16 -t UTF-8 {path.name})."
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"Text file {path} is not valid UTF-8 (byte {exc.start}: {exc.reason}). Convert "
            f"it to UTF-8, e.g. iconv -f LATIN1 -t UTF-8 {path.name} > converted.txt, if it "
            "is Latin-1."
        ) from exc


# ----------------------------------------------------------------------------- output


def _build(plan: _Plan, settings: dict, staging: Path) -> DatasetManifest:
    documents, skipped = plan.load()
    if not documents:
        raise DataError(
            f"No document in {plan.description} is long enough for one window of "
            f"{settings['context_words'] + settings['target_words']} words. Lower "
            "--context-words / --target-words."
        )
    if skipped:
        log.info("Skipped %d documents shorter than one window: %s", len(skipped),
                 ", ".join(skipped))
    counts = {d.doc_id: window_count(len(d.words), **settings) for d in documents}
    split = text_split.split_corpus(counts, text_split.gap_windows(**settings))
    written = _write_splits(documents, settings, split, staging)
    return DatasetManifest(
        kind="text",
        source=plan.description,
        num_examples=written,
        classes=[],
        class_counts={},
        image_shape=None,
        fingerprint=plan.fingerprint,
        examples_dir=str(staging),
        extra={
            "source_kind": plan.kind,
            "format_version": FORMAT_VERSION,
            **settings,
            "split_feature": features.SPLIT_FEATURE,
            "split": split.to_json(),
            # ExampleGen reads these as its train/eval splits (pipeline/graph.py).
            "split_patterns": {name: f"{name}-{SHARD_PATTERN}" for name in _SPLITS},
            "num_documents": len(documents),
            "num_words": sum(len(d.words) for d in documents),
            "documents": [d.doc_id for d in documents],
            "document_words": {d.doc_id: len(d.words) for d in documents},
            "document_windows": counts,
            "skipped_documents": skipped,
            **plan.extra,
        },
    )


_SPLITS = (text_split.TRAIN, text_split.EVAL)


def _write_splits(documents: list[_Document], settings: dict, split: text_split.CorpusSplit,
                  staging: Path) -> int:
    """Write ``<split>-examples-*.tfrecord.gz`` per split into ``staging``; gap windows are dropped."""
    counts = split.counts()
    if not counts[text_split.TRAIN] or not counts[text_split.EVAL]:
        span = settings["context_words"] + settings["target_words"]
        needed = span + (split.gap + 1) * settings["stride"]  # a train window, a gap, an eval window
        raise DataError(
            f"The corpus is too short to hold out text for evaluation: its longest document has "
            f"{max(len(d.words) for d in documents)} words, and a document needs at least "
            f"{needed} words (windows of {span} words; those overlapping both splits are "
            "dropped). Add text (a few thousand words make a meaningful evaluation), or lower "
            "--context-words / --target-words."
        )
    labels = [split.label(d.doc_id, i) for d in documents
              for i in range(window_count(len(d.words), **settings))]
    written = 0
    for name in _SPLITS:
        num_shards = min(_MAX_SHARDS, max(1, math.ceil(counts[name] / _WINDOWS_PER_SHARD)))
        chosen = (example for example, label in zip(_examples(documents, **settings), labels)
                  if label == name)
        part = staging.with_name(f"{staging.name}.{name}")
        written += write_examples(chosen, part, num_shards)
        staging.mkdir(parents=True, exist_ok=True)
        for shard in sorted(part.iterdir()):
            os.rename(shard, staging / f"{name}-{shard.name}")
        part.rmdir()
    return written


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

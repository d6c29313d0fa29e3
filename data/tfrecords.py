"""Format-agnostic TFRecord helpers: atomic writing of GZIP shards and checked reading.

Reading checks every record, so a truncated or mislabelled file is named in one
paragraph instead of failing deep inside Beam. The cache of prepared datasets is in
``data.prepare``; the manifest in ``data.manifest`` (both names are re-exported here for
the callers that import them from this module).
"""
from __future__ import annotations

import gzip
import logging
import os
import re
import shutil
import tempfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

import tensorflow as tf

from data.errors import DataError
from data.manifest import MANIFEST_NAME, SHARD_PATTERN, DatasetManifest, ImageFacts  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

# Suffixes accepted as TFRecord input; ".gz" ones are read as GZIP-compressed.
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")
# Each record is framed by an 8-byte length, a 4-byte length CRC and a 4-byte data CRC.
_RECORD_OVERHEAD = 16


# ----------------------------------------------------------------------------- writing


def shard_name(index: int, num_shards: int) -> str:
    return f"examples-{index:05d}-of-{num_shards:05d}.tfrecord.gz"


def write_examples(
    examples: Iterable[tf.train.Example],
    directory: str | os.PathLike,
    num_shards: int = 1,
) -> int:
    """Write examples round-robin into GZIP TFRecord shards in ``directory``; return the count.

    Files are written into a temporary sibling directory that is renamed into place at the
    end (replacing ``directory`` if it exists), so a crash never leaves a partial dataset
    under the final name.
    """
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1, got {num_shards}")
    directory = Path(directory).absolute()
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.tmp-", dir=directory.parent))
    try:
        count = 0
        writers = [
            tf.io.TFRecordWriter(str(tmp / shard_name(i, num_shards)), options="GZIP")
            for i in range(num_shards)
        ]
        try:
            for count, example in enumerate(examples, start=1):
                # deterministic=True sorts the feature map: same examples, same bytes.
                writers[(count - 1) % num_shards].write(
                    example.SerializeToString(deterministic=True)
                )
        finally:
            for writer in writers:
                writer.close()
        os.chmod(tmp, 0o755)  # mkdtemp makes it owner-only; readers may be other users.
        replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return count


def replace_dir(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first, then deleted."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
        os.rename(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, target)


# ------------------------------------------------------------------------------ reading


def is_tfrecord_path(path: str | os.PathLike) -> bool:
    return str(path).lower().endswith(TFRECORD_SUFFIXES)


def list_files(pattern: str | os.PathLike) -> list[str]:
    """Sorted files matching a glob (or a single path); DataError if there are none."""
    files = sorted(f for f in tf.io.gfile.glob(str(pattern)) if not tf.io.gfile.isdir(f))
    if not files:
        raise DataError(
            f"No TFRecord files match {pattern}. Check the path and the file pattern; "
            f"TFRecord files are expected to end in one of {', '.join(TFRECORD_SUFFIXES)}."
        )
    return files


def iter_records(path: str | os.PathLike) -> Iterator[bytes]:
    """Yield the serialized records of one TFRecord file, checking it is complete.

    GZIP is assumed for names ending in ".gz". TensorFlow silently stops at some kinds of
    truncation (a cut inside a record header, a missing GZIP trailer), so the bytes
    consumed are also compared with the file's (decompressed) size.
    """
    path = str(path)
    compressed = path.lower().endswith(".gz")
    dataset = tf.data.TFRecordDataset(path, compression_type="GZIP" if compressed else "")
    consumed = 0
    try:
        for record in dataset.as_numpy_iterator():
            consumed += len(record) + _RECORD_OVERHEAD
            yield record
    except tf.errors.OpError as exc:
        detail = re.sub(r"\{\{[^}]*\}\}\s*", "", exc.message).split("[Op:")[0].strip()
        raise _corrupt(path, compressed, detail) from exc
    size = _gzip_size(path) if compressed else tf.io.gfile.stat(path).length
    if size != consumed:
        raise _corrupt(path, compressed, f"{size - consumed} bytes after the last whole record")


def _gzip_size(path: str) -> int:
    """Decompressed size of a GZIP file; raises DataError if the stream is truncated."""
    size = 0
    try:
        with tf.io.gfile.GFile(path, "rb") as raw, gzip.open(raw, "rb") as stream:
            while chunk := stream.read(1 << 20):
                size += len(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, True, str(exc)) from exc
    return size


def _corrupt(path: str, compressed: bool, detail: str) -> DataError:
    hint = ""
    if not compressed:
        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                looks_gzip = f.read(2) == b"\x1f\x8b"
        except (OSError, tf.errors.OpError):
            looks_gzip = False
        hint = (
            " It looks GZIP-compressed: rename it to end in .gz so it is read as such."
            if looks_gzip else
            " If the file is GZIP-compressed, give it a name ending in .gz."
        )
    return DataError(
        f"TFRecord file {path} is corrupt or truncated ({detail}). It was probably cut off "
        "by an interrupted copy or download: copy or regenerate the file and try again."
        + hint
    )


def parse_example(record: bytes, path: str, index: int) -> tf.train.Example:
    try:
        return tf.train.Example.FromString(record)
    except Exception as exc:  # protobuf's DecodeError type differs between backends
        raise DataError(
            f"Record {index} of TFRecord file {path} is not a tf.train.Example ({exc}). "
            "Only files of serialized tf.train.Example protos can be used as input."
        ) from exc


def iter_file_examples(path: str | os.PathLike) -> Iterator[tf.train.Example]:
    """Yield the parsed examples of one TFRecord file."""
    for index, record in enumerate(iter_records(path)):
        yield parse_example(record, str(path), index)

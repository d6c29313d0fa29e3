"""Format-agnostic TFRecord helpers: dataset manifest, atomic writing, cache, checked reading.

Prepared datasets live in a content-addressed cache, ``<cache_root>/<fingerprint[:16]>/``,
holding the TFRecord shards and a ``manifest.json`` written last. A directory with a
manifest is complete and is reused as is: TFX's ImportExampleGen fingerprints its input
files by size and modification time, so rewriting identical files would needlessly
invalidate every downstream cached component.
"""
from __future__ import annotations

import dataclasses
import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import tensorflow as tf

from data.errors import DataError

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"
SHARD_PATTERN = "*.tfrecord.gz"
# Suffixes accepted as TFRecord input; ".gz" ones are read as GZIP-compressed.
TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords", ".tfrecord.gz", ".tfrecords.gz")
# Each record is framed by an 8-byte length, a 4-byte length CRC and a 4-byte data CRC.
_RECORD_OVERHEAD = 16
_FINGERPRINT_RE = re.compile(r"^[0-9a-f]{16,}$")


@dataclasses.dataclass
class DatasetManifest:
    """Description of a prepared dataset; the pipeline reads data only through it."""

    kind: str
    source: str
    num_examples: int
    classes: list[str]
    class_counts: dict[str, int]
    image_shape: list[int] | None
    fingerprint: str
    examples_dir: str
    file_pattern: str = SHARD_PATTERN
    files: list[str] = dataclasses.field(default_factory=list)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def examples_glob(self) -> str:
        """Absolute glob of the TFRecord shards."""
        return os.path.join(self.examples_dir, self.file_pattern)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: str | os.PathLike) -> None:
        """Write the manifest atomically, so a reader never sees a half-written file."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        os.replace(tmp, path)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DatasetManifest:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    @classmethod
    def from_json(cls, path: str | os.PathLike) -> DatasetManifest:
        try:
            return cls.from_dict(json.loads(Path(path).read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise DataError(
                f"Dataset manifest {path} cannot be read ({exc}). It is written last when "
                "a dataset is prepared, so it should only be damaged by hand edits or a "
                "full disk: delete its directory and prepare the data again."
            ) from exc


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
        _replace_dir(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return count


def _replace_dir(new: Path, target: Path) -> None:
    """Rename ``new`` to ``target``; an existing ``target`` is moved aside first, then deleted."""
    if target.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
        os.replace(target, old / target.name)
        os.rename(new, target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.rename(new, target)


# ------------------------------------------------------------------------------- cache


def source_fingerprint(format_version: int, kind: str, **parts: object) -> str:
    """Content-address of a prepared dataset: what it was made from and how."""
    payload = {"kind": kind, "format_version": format_version, **parts}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def file_stats(paths: list[Path], root: Path) -> list[tuple[str, int, int]]:
    """(relative path, size, mtime_ns) per source file: what makes the fingerprint change."""
    stats = []
    for path in paths:
        try:
            st = path.stat()
        except OSError as exc:
            raise DataError(
                f"Cannot read {path} ({exc.strerror}). Check that the file exists and is "
                "readable by the user running the pipeline."
            ) from exc
        stats.append((path.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return stats


def prepared_dir(cache_root: str | os.PathLike, fingerprint: str) -> Path:
    """Directory of the prepared dataset with this fingerprint (short prefix, absolute)."""
    if not _FINGERPRINT_RE.match(fingerprint):
        raise ValueError(f"fingerprint must be >= 16 lowercase hex digits, got {fingerprint!r}")
    return Path(cache_root).expanduser().absolute() / fingerprint[:16]


def load_cached(cache_root: str | os.PathLike, fingerprint: str) -> DatasetManifest | None:
    """Return the manifest of a complete cached dataset, or None if there is none.

    Read-only: nothing in the cache is touched, so file mtimes (and TFX's input
    fingerprint) stay the same. A directory whose manifest lists missing files is treated
    as absent. If the cache was moved, ``examples_dir`` is updated in the returned object.
    """
    out = prepared_dir(cache_root, fingerprint)
    manifest_path = out / MANIFEST_NAME
    if not manifest_path.is_file():
        return None
    try:
        manifest = DatasetManifest.from_json(manifest_path)
    except DataError as exc:
        log.warning("Ignoring unreadable cached dataset: %s", exc)
        return None
    if manifest.fingerprint != fingerprint:
        return None  # A 16-digit prefix collision; build anew (in place, replacing it).
    if any(not (out / name).is_file() for name in manifest.files):
        log.warning("Cached dataset %s is missing files; preparing it again.", out)
        return None
    manifest.examples_dir = str(out)
    return manifest


def build_cached(
    cache_root: str | os.PathLike,
    fingerprint: str,
    build: Callable[[Path], DatasetManifest],
) -> tuple[DatasetManifest, bool]:
    """Return ``(manifest, reused)``: the cached dataset, or one built by ``build``.

    ``build(staging_dir)`` must write the TFRecord shards into ``staging_dir`` (a path
    that does not exist yet, e.g. with :func:`write_examples`) and return the manifest.
    The manifest is written last and the staging directory is renamed to the final one,
    so the final directory either is complete or does not exist.
    """
    cached = load_cached(cache_root, fingerprint)
    if cached is not None:
        return cached, True
    out = prepared_dir(cache_root, fingerprint)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.build-", dir=out.parent))
    staging = work / out.name
    try:
        manifest = build(staging)
        manifest.fingerprint = fingerprint
        manifest.examples_dir = str(out)
        manifest.files = sorted(
            p.name for p in staging.iterdir() if p.match(manifest.file_pattern)
        )
        manifest.to_json(staging / MANIFEST_NAME)
        cached = load_cached(cache_root, fingerprint)
        if cached is not None:
            return cached, True  # Another process finished the same dataset meanwhile.
        if out.exists():
            _replace_dir(staging, out)  # Leftover without a valid manifest.
        else:
            try:
                os.rename(staging, out)
            except OSError:
                cached = load_cached(cache_root, fingerprint)
                if cached is None:
                    raise
                return cached, True
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest, False


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
    size = _gzip_size(path) if compressed else os.path.getsize(path)
    if size != consumed:
        raise _corrupt(path, compressed, f"{size - consumed} bytes after the last whole record")


def _gzip_size(path: str) -> int:
    """Decompressed size of a GZIP file; raises DataError if the stream is truncated."""
    size = 0
    try:
        with gzip.open(path, "rb") as stream:
            while chunk := stream.read(1 << 20):
                size += len(chunk)
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt(path, True, str(exc)) from exc
    return size


def _corrupt(path: str, compressed: bool, detail: str) -> DataError:
    hint = ""
    if not compressed:
        try:
            with open(path, "rb") as f:
                looks_gzip = f.read(2) == b"\x1f\x8b"
        except OSError:
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


def read_examples(pattern: str | os.PathLike) -> Iterator[tf.train.Example]:
    """Yield the parsed examples of all files matching ``pattern``, in file-name order."""
    for path in list_files(pattern):
        yield from iter_file_examples(path)


def count_records(pattern: str | os.PathLike) -> int:
    """Number of records in all files matching ``pattern`` (reads and checks every file)."""
    return sum(1 for path in list_files(pattern) for _ in iter_records(path))

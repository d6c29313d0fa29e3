"""From a source to a cached, prepared dataset: the machinery images and text share.

A source reader makes a :class:`SourcePlan` (listing and stat only, so a cache hit stays
cheap); :func:`prepare` then, on a cache miss, loads the source, lets the family's
converter turn it into examples plus manifest facts, writes them with
``data.tfrecords.write_examples`` into a staging directory, and publishes it in the
content-addressed cache ``<cache_root>/<fingerprint[:16]>/`` with the manifest written
last. A directory with a manifest is complete and is reused as is: TFX's
ImportExampleGen fingerprints its input files by size and modification time, so
rewriting identical files would needlessly invalidate every downstream cached component.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Generic, TypeVar

import tensorflow as tf

from data.errors import DataError
from data.manifest import MANIFEST_NAME, DatasetManifest, ImageFacts
from data.tfrecords import replace_dir, write_examples

log = logging.getLogger(__name__)

_FINGERPRINT_RE = re.compile(r"^[0-9a-f]{16,}$")
# Shard cap: enough for parallel Beam reads (GZIP files cannot be split), few files.
MAX_SHARDS = 64

Loaded = TypeVar("Loaded")


@dataclasses.dataclass
class SourcePlan(Generic[Loaded]):
    """A detected source: cheap to make (listing + stat only), so cache hits stay cheap."""

    kind: str  # e.g. "digits", "folder", "text-file": recorded as extra["source_kind"]
    description: str
    fingerprint: str
    load: Callable[[Path], Loaded]  # argument: a scratch directory for large buffers
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Conversion:
    """What a family's converter hands back: the examples and the facts for the manifest."""

    examples: Iterable[tf.train.Example]
    num_shards: int
    extra: dict[str, Any]
    image: ImageFacts | None = None
    # Splits decided by the converter (name -> (examples, shards)), written as ``<name>-*``
    # shards instead of ``examples``; ExampleGen then reads them as its splits.
    splits: dict[str, tuple[Iterable[tf.train.Example], int]] = dataclasses.field(default_factory=dict)


def prepare(
    plan: SourcePlan[Loaded],
    cache_root: str | os.PathLike,
    dataset_kind: str,
    format_version: int,
    convert: Callable[[Loaded], Conversion],
) -> tuple[DatasetManifest, bool]:
    """Return ``(manifest, reused)`` for ``plan``: from the cache, or converted anew."""
    def build(staging: Path) -> DatasetManifest:
        scratch = staging.parent / "scratch"
        scratch.mkdir()
        conversion = convert(plan.load(scratch))
        if conversion.splits:
            count = sum(_write_split(name, examples, num_shards, staging)
                        for name, (examples, num_shards) in conversion.splits.items())
        else:
            count = write_examples(conversion.examples, staging, conversion.num_shards)
        return DatasetManifest(
            kind=dataset_kind,
            source=plan.description,
            num_examples=count,
            fingerprint=plan.fingerprint,
            examples_dir=str(staging),
            image=conversion.image,
            extra={"source_kind": plan.kind, "format_version": format_version,
                   **conversion.extra, **plan.extra},
        )

    return build_cached(cache_root, plan.fingerprint, build)


def _write_split(name: str, examples: Iterable[tf.train.Example], num_shards: int, staging: Path) -> int:
    """Write one split's shards into ``staging`` as ``<name>-<shard>``; return the count."""
    part = staging.with_name(f"{staging.name}.{name}")
    count = write_examples(examples, part, num_shards)
    staging.mkdir(parents=True, exist_ok=True)
    for shard in sorted(part.iterdir()):
        os.rename(shard, staging / f"{name}-{shard.name}")
    part.rmdir()
    return count


def shard_count(size: int, per_shard: int) -> int:
    """Shards for ``size`` units of data at about ``per_shard`` each, 1 to MAX_SHARDS."""
    return min(MAX_SHARDS, max(1, math.ceil(size / per_shard)))


# ------------------------------------------------------------------------ listing


def special_file(path: str | os.PathLike) -> bool:
    """True for a local fifo, socket or device: never opened (a read can block forever).
    Every listing of a data folder (images and text, both ingestion paths) asks this."""
    path = os.fspath(path)
    if "://" in path:
        return False  # object stores hold only objects
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False  # gone or unreadable: the read names it
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


# ------------------------------------------------------------------------------- cache


def source_fingerprint(format_version: int, kind: str, **parts: object) -> str:
    """Content-address of a prepared dataset: what it was made from and how."""
    payload = {"kind": kind, "format_version": format_version, **parts}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


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
            replace_dir(staging, out)  # Leftover without a valid manifest.
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



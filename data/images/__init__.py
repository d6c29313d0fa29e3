"""Turn an image source into cached TFRecords of ``tf.train.Example`` (spec: ``data.features``).

Supported sources, detected from the path, one reader module each:

* ``None``: scikit-learn's bundled 8x8 digits (``digits``);
* a folder with one sub-folder of PNG/JPEG images per class (``folder``, listed by ``listing``),
  resized to a square ``image_size`` and converted to ``channels``;
* a CIFAR-10 "python version" folder, the ``cifar-10-batches-py`` folder itself or its
  parent (``cifar``);
* TFRecord files already in the feature spec, a folder of them or a single file (``records``).

The source is detected, listed and read exactly as the pipeline's ExampleGen does it
(``sources``: ``list_source``, then ``read_unit`` per unit, here all of them in one process),
on any ``tf.io.gfile`` filesystem. Pixels are converted by ``pixels`` and written by ``writer``;
the result always goes to ``<cache_root>/<fingerprint[:16]>/`` (see ``data.prepare``), so the
pipeline reads one layout whatever the source, and an unchanged source is not converted again.
"""
from __future__ import annotations

import logging
import numbers
import os
from pathlib import Path

from data.errors import DataError
from data.images.folder import DEFAULT_CHANNELS, DEFAULT_IMAGE_SIZE  # noqa: F401  (re-exported)
from data.images.listing import IGNORED_DIRS, IMAGE_SUFFIXES  # noqa: F401  (re-exported)
from data.images.pixels import load_image_array  # noqa: F401  (re-exported)
from data.images.sources import BUNDLED_DIGITS, Listing, list_source, read_listing
from data.images.writer import FORMAT_VERSION, ImageSet, convert, make_example  # noqa: F401
from data.manifest import DatasetManifest
from data.prepare import SourcePlan, prepare, source_fingerprint
from data.walk import Problem, stat_one

log = logging.getLogger(__name__)

MAX_IMAGE_SIZE = 4096


def prepare_image_dataset(
    source: str | os.PathLike | None,
    cache_root: str | os.PathLike,
    image_size: int | None = None,
    channels: int | None = None,
    follow_links: bool = False,
) -> DatasetManifest:
    """Convert ``source`` to TFRecords under ``cache_root`` (or reuse them) and describe them.

    Args:
        source: a folder of class sub-folders, a CIFAR-10 python folder, TFRecords in this project's
            feature spec, or None / "" for the bundled digits.
        cache_root: where the TFRecords and their manifest go (reused when the source is unchanged).
        image_size: the output's height and width; None keeps digits', CIFAR's and TFRecords' native
            size and gives folders their images' own side up to 32 (``folder.default_shape``).
        channels: 1 or 3; None keeps the source's (folders: grayscale when every image is).
        follow_links: read symbolic links inside the folder (never outside it).

    Raises:
        DataError: any bad input, with one paragraph saying what, where and how to fix it.
    """
    image_size, channels = _check_shape_args(image_size, channels)
    plan = _plan(source, image_size, channels, follow_links)
    manifest, reused = prepare(plan, cache_root, "image", FORMAT_VERSION, convert)
    shown = ", ".join(manifest.classes[:10]) + (", ..." if len(manifest.classes) > 10 else "")
    log.info(
        "Image dataset from %s (%s): %d examples, %d classes [%s], shape %s -> %s%s",
        plan.kind, plan.description, manifest.num_examples, len(manifest.classes), shown,
        "x".join(map(str, manifest.image_shape or [])), manifest.examples_dir,
        " (cached)" if reused else "",
    )
    log.debug("Examples per class: %s", manifest.class_counts)
    return manifest


def _check_shape_args(image_size: object, channels: object) -> tuple[int | None, int | None]:
    """Validate the shape options; returns them as plain ints (numpy ints break JSON)."""
    if image_size is not None and (
        isinstance(image_size, bool) or not isinstance(image_size, numbers.Integral)
        or not 1 <= int(image_size) <= MAX_IMAGE_SIZE
    ):
        raise DataError(
            f"Image size {image_size!r} is not valid: it must be a whole number of pixels "
            f"between 1 and {MAX_IMAGE_SIZE} (images are resized to size x size). Pass e.g. "
            "--image-size 32, or leave it out to use the source's native size."
        )
    if channels is not None and (isinstance(channels, bool) or channels not in (1, 3)):
        raise DataError(
            f"Channels {channels!r} is not valid: use 1 for grayscale or 3 for RGB "
            "(--channels 1 or --channels 3), or leave it out for the source's default."
        )
    return (
        None if image_size is None else int(image_size),
        None if channels is None else int(channels),
    )


def _plan(source: str | os.PathLike | None, image_size: int | None,
          channels: int | None, follow_links: bool = False) -> SourcePlan[ImageSet]:
    """The source as the ExampleGen lists it (``sources.list_source``: one detection, one lister per format,
    the same paragraphs for bad input), read whole by the same per-unit readers."""
    if source is None or not str(source).strip():
        root = BUNDLED_DIGITS
    elif "://" in str(source):
        root = str(source).rstrip("/")
    else:
        root = str(Path(source).expanduser().resolve())
    listing = list_source(root, image_size, channels, follow_links)
    if listing.kind == "digits":
        import sklearn

        description = f"scikit-learn {sklearn.__version__} bundled digits"
        origin: dict[str, object] = {"sklearn": sklearn.__version__}
    else:
        description = {"folder": "image folder", "cifar": "CIFAR-10 batches",
                       "tfrecord": "TFRecord files"}[listing.kind] + f" {listing.root}"
        origin = {"root": listing.root, "files": _unit_stats(listing)}
    size, _, ch = listing.shape
    return SourcePlan(
        kind=listing.kind,
        description=description,
        fingerprint=source_fingerprint(FORMAT_VERSION, listing.kind, size=size, channels=ch, **origin),
        load=lambda scratch: read_listing(listing, scratch),
        extra={**({"source_path": listing.root} if listing.kind != "digits" else {}),
               **({"unused": listing.unused} if listing.unused else {}),
               **({"cifar_batches": [unit.uri.rsplit("/", 1)[-1] for unit in listing.units]}
                  if listing.kind == "cifar" else {})},
    )


def _unit_stats(listing: Listing) -> list[tuple[str, int, int]]:
    """(path relative to the root, size, mtime in ns) of every file read: what makes the fingerprint change."""
    stats = []
    read = [unit.uri for unit in listing.units]
    if listing.kind == "cifar":  # the class names come from batches.meta
        read.append(f"{listing.root.rstrip('/')}/batches.meta")
    for uri in dict.fromkeys(read):
        info = stat_one(uri)  # os.stat locally, tf.io.gfile.stat for a URI
        if isinstance(info, Problem):
            raise DataError(f"Cannot read {uri} ({info.detail}). Check that the file exists and is readable by "
                            "the user running the pipeline.")
        stats.append((uri[len(listing.root.rstrip("/")) + 1:] or info.relative, info.size, info.mtime_ns))
    return stats

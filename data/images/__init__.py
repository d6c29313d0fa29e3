"""Turn an image source into cached TFRecords of ``tf.train.Example`` (spec: ``data.features``).

Supported sources, detected from the path, one reader module each:

* ``None``: scikit-learn's bundled 8x8 digits (``digits``);
* a folder with one sub-folder of PNG/JPEG images per class (``folder``), resized to a
  square ``image_size`` and converted to ``channels``;
* a CIFAR-10 "python version" folder, the ``cifar-10-batches-py`` folder itself or its
  parent (``cifar``);
* TFRecord files already in the feature spec, a folder of them or a single file (``records``).

Pixels are converted by ``pixels`` and written by ``writer``; the result always goes to
``<cache_root>/<fingerprint[:16]>/`` (see ``data.prepare``), so the pipeline reads one
layout whatever the source, and an unchanged source is not converted again.
"""
from __future__ import annotations

import logging
import numbers
import os
from pathlib import Path

from data.errors import DataError
from data.images.cifar import CIFAR_BATCH_RE, find_cifar_dir, plan_cifar
from data.images.digits import plan_digits
from data.images.folder import (  # noqa: F401  (re-exported)
    DEFAULT_CHANNELS,
    DEFAULT_IMAGE_SIZE,
    IGNORED_DIRS,
    IMAGE_SUFFIXES,
    plan_folder,
)
from data.images.pixels import load_image_array  # noqa: F401  (re-exported)
from data.images.records import plan_tfrecords
from data.images.writer import FORMAT_VERSION, ImageSet, convert, make_example  # noqa: F401
from data.manifest import DatasetManifest
from data.prepare import SourcePlan, prepare, visible_entries
from data.tfrecords import is_tfrecord_path

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
    if source is None or not str(source).strip():
        return plan_digits(image_size, channels)
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError(
            f"Data source {path} does not exist. Give the path of a folder with one "
            "sub-folder of images per class, a CIFAR-10 python batch folder, or TFRecord "
            "files, or leave the source out to use the bundled digits data set."
        )
    path = path.resolve()
    if path.is_file():
        if is_tfrecord_path(path):
            return plan_tfrecords(path, [path], image_size, channels)
        hint = (
            " It looks like an archive: extract it and pass the extracted folder."
            if path.name.lower().endswith((".tar.gz", ".tgz", ".tar", ".zip")) else ""
        )
        raise DataError(
            f"Data source {path} is a file but not a TFRecord file (expected a name ending "
            f"in .tfrecord, .tfrecords or .tfrecord.gz).{hint} For images, pass the folder "
            "that holds one sub-folder per class rather than a single file."
        )
    if not path.is_dir():
        raise DataError(
            f"Data source {path} is neither a regular file nor a folder. Pass a folder of "
            "class sub-folders, a CIFAR-10 batch folder or TFRecord files."
        )
    entries = visible_entries(path, IGNORED_DIRS)
    cifar_dir = find_cifar_dir(str(path))
    if cifar_dir is not None:
        return plan_cifar(Path(cifar_dir), image_size, channels)
    if any(CIFAR_BATCH_RE.match(e.name) for e in entries):
        raise DataError(
            f"Folder {path} holds CIFAR-10 batch files but no batches.meta (which has the "
            "class names). Copy batches.meta from the CIFAR-10 python archive into it."
        )
    records = [e for e in entries if e.is_file() and is_tfrecord_path(e)]
    if records:
        return plan_tfrecords(path, records, image_size, channels)
    return plan_folder(path, image_size, channels, follow_links)


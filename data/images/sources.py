"""Image sources as units: one listing per format, then one reader per unit, for both ingestion paths.

The ExampleGen (``components/image_example_gen.py``) reads the units (an image file, a CIFAR batch,
a TFRecord file) in parallel Beam workers; the prepare step (``data.images``) reads the same units
in one process into one scratch-backed array (:func:`read_listing`). Both go through
``tf.io.gfile``, so a ``gs://`` or ``s3://`` folder reads like a local one. The listing is cheap
(names only, plus a few image headers for a folder's default shape and one record for a TFRecord
shape) and is where every bad-input paragraph about the source's layout is raised; the readers
call the shared pixel conversion (``pixels``), CIFAR and TFRecord checks, so both paths produce
the same examples.
"""
from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import tensorflow as tf

from data.errors import DataError
from data.images import cifar, records
from data.images.folder import default_shape
from data.images.listing import IGNORED_DIRS, Unused, join, list_class_files, special_file, visible_names
from data.images.pixels import MODES, convert_all, convert_array, load_image_file
from data.images.writer import ImageSet
from data.tfrecords import is_tfrecord_path, iter_file_examples
from data.walk import isdir, printable

log = logging.getLogger(__name__)

#: ``input_base`` of the bundled digits: no file to read, so nothing machine-specific in the spec.
BUNDLED_DIGITS = "bundled:digits"
#: Unreadable files named in the error (all are counted).
BAD_FILES_SHOWN = 20

#: The bundled digits' classes, sorted as every class list is ("0" .. "9": all ten occur).
DIGIT_CLASSES = tuple(sorted(str(digit) for digit in range(10)))

#: One decoded image: (pixels HWC uint8, class name, example id).
Image = tuple[np.ndarray, str, str]


@dataclasses.dataclass(frozen=True, slots=True)
class Unit:
    """One independently readable piece of a source."""

    kind: str   # "digits", "folder", "cifar", "tfrecord"
    uri: str    # the file to read ("" for the bundled digits)
    label: str = ""        # folder: the class name
    example_id: str = ""   # folder: the path relative to the root; tfrecord: the file's relative path


def unit_key(unit: Unit) -> str:
    """The unit's name relative to the source, as the prepare step names it (``ImageSet.units``):
    what the brightness sample and the write order are drawn by (``brightness.unit_rank``)."""
    if unit.kind == "cifar":
        return unit.uri.rsplit("/", 1)[-1]
    return unit.example_id


@dataclasses.dataclass(frozen=True)
class Listing:
    """What a source holds, known from names alone (plus one record for a TFRecord shape)."""

    kind: str
    root: str
    shape: tuple[int, int, int]          # output shape of every image
    units: tuple[Unit, ...]
    classes: tuple[str, ...] | None      # None: only known after reading (TFRecords: records.record_labels)
    class_names: tuple[str, ...] = ()    # CIFAR: label index -> name, as in batches.meta
    native_shape: tuple[int, int, int] | None = None  # TFRecords: the stored shape
    unused: dict | None = None           # folder: what the listing did not read (listing.Unused.facts)


def list_source(root: str, image_size: int | None, channels: int | None, follow_links: bool = False) -> Listing:
    """Detect the kind of source at ``root`` and list its units; DataError for bad input."""
    if root == BUNDLED_DIGITS:
        return Listing("digits", root, (image_size or 8, image_size or 8, channels or 1),
                       (Unit("digits", ""),), DIGIT_CLASSES)
    if not tf.io.gfile.exists(root):
        raise DataError(
            f"Data source {root} does not exist. Give the path of a folder with one "
            "sub-folder of images per class, a CIFAR-10 python batch folder, or TFRecord "
            "files, or leave the source out to use the bundled digits data set."
        )
    if special_file(root):
        raise DataError(
            f"Data source {root} is neither a regular file nor a folder (a fifo, socket or device); "
            "it is not opened. Pass a folder of class sub-folders, a CIFAR-10 batch folder or TFRecord files."
        )
    if not tf.io.gfile.isdir(root):
        if is_tfrecord_path(root):
            return _list_tfrecords(root.rsplit("/", 1)[0], [root], image_size, channels)
        hint = (" It looks like an archive: extract it and pass the extracted folder."
                if root.lower().endswith((".tar.gz", ".tgz", ".tar", ".zip")) else "")
        raise DataError(
            f"Data source {root} is a file but not a TFRecord file (expected a name ending "
            f"in .tfrecord, .tfrecords or .tfrecord.gz).{hint} For images, pass the folder that holds "
            "one sub-folder per class rather than a single file."
        )
    names = visible_names(root, IGNORED_DIRS)
    cifar_dir = cifar.find_cifar_dir(root)
    if cifar_dir is not None:
        return _list_cifar(cifar_dir, cifar.cifar_batches(cifar_dir), image_size, channels)
    if any(cifar.CIFAR_BATCH_RE.match(n) for n in names):
        raise DataError(
            f"Folder {root} holds CIFAR-10 batch files but no batches.meta (which has the "
            "class names). Copy batches.meta from the CIFAR-10 python archive into it."
        )
    tfrecords = [join(root, n) for n in names if is_tfrecord_path(n) and not isdir(join(root, n))
                 and not special_file(join(root, n))]
    if tfrecords:
        return _list_tfrecords(root, tfrecords, image_size, channels)
    return _list_folder(root, image_size, channels, follow_links)


def _list_folder(root: str, image_size: int | None, channels: int | None, follow_links: bool = False) -> Listing:
    unused = Unused()
    per_class = list_class_files(root, unused, follow_links)
    units = [Unit("folder", path, name, printable(path[len(root.rstrip("/")) + 1:]))
             for name, images in per_class.items() for path in images]
    size, ch = default_shape([unit.uri for unit in units], image_size, channels)
    return Listing("folder", root, (size, size, ch), tuple(units), tuple(per_class), unused=unused.facts())


def _list_cifar(folder: str, batches: list[str], image_size: int | None, channels: int | None) -> Listing:
    meta = join(folder, "batches.meta")
    names = [n.decode() if isinstance(n, bytes) else str(n)
             for n in cifar._unpickle_cifar(meta, (b"label_names",))[b"label_names"]]
    if len(set(names)) != len(names) or not names:
        raise DataError(
            f"CIFAR-10 file {meta} has empty or repeated label names {names}; "
            "each class needs a distinct name. Re-extract the CIFAR-10 archive."
        )
    size, ch = image_size or 32, channels or 3
    return Listing("cifar", folder, (size, size, ch), tuple(Unit("cifar", b) for b in batches),
                   tuple(sorted(names)), class_names=tuple(names))


def _list_tfrecords(base: str, files: list[str], image_size: int | None, channels: int | None) -> Listing:
    """The stored shape comes from the first record (every record is checked against it when read)."""
    first = next(iter(iter_file_examples(files[0])), None)
    if first is None:
        raise DataError(
            f"The TFRecord files in {base} hold no records. Write the examples again, or "
            "point the source at the folder that holds the real data."
        )
    _, _, pixels = records._parse_record(first, files[0], 0)
    native = records._source_shape(base, len(pixels), image_size, channels)
    target = (image_size or native[0], image_size or native[1], channels or native[2])
    if target != native and native[2] not in MODES:
        raise DataError(
            f"Images in {base} have {native[2]} channels, which cannot be resized or "
            "converted. Leave out --image-size and --channels to keep them as they are."
        )
    units = tuple(Unit("tfrecord", f, example_id=f[len(base.rstrip("/")) + 1:]) for f in files)
    return Listing("tfrecord", base, target, units, None, native_shape=native)


def read_unit(unit: Unit, listing: Listing) -> Iterator[Image]:
    """The images of one unit, converted to ``listing.shape`` exactly as the prepare step does."""
    if unit.kind == "folder":
        yield load_image_file(unit.uri, listing.shape), unit.label, unit.example_id
    elif unit.kind == "cifar":
        data, labels = cifar._read_cifar_batch(unit.uri, len(listing.class_names))
        pixels = convert_all(data, listing.shape)
        name = unit.uri.rsplit("/", 1)[-1]
        for i, label_index in enumerate(labels):
            yield pixels[i], listing.class_names[label_index], f"cifar/{name}/{i}"
    elif unit.kind == "tfrecord":
        native_shape = listing.native_shape
        assert native_shape is not None  # _list_tfrecords records it
        length = math.prod(native_shape)
        for index, example in enumerate(iter_file_examples(unit.uri)):
            label, example_id, pixels = records._parse_record(example, unit.uri, index)
            if len(pixels) != length:
                raise DataError(
                    f"Record {index} of TFRecord file {unit.uri} has an image of {len(pixels)} "
                    f"values, but earlier records have {length}. All images must have the "
                    "same shape: resize them to one size before writing the TFRecords."
                )
            image = convert_array(pixels.reshape(native_shape), listing.shape)
            yield image, label, example_id or f"{unit.example_id}/{index}"
    else:
        from data.images.digits import digit_images

        size, _, ch = listing.shape
        images = digit_images(size, ch)
        for i, label in enumerate(images.labels):
            yield images.pixels[i], label, images.ids[i]


def read_listing(listing: Listing, scratch: Path) -> ImageSet:
    """Every image of the source, in listing order, in one array backed by a file in ``scratch`` (the prepare
    step: memory stays flat at any size). Files that cannot be read are all named in one paragraph."""
    if listing.kind == "digits":
        from data.images.digits import digit_images

        return digit_images(listing.shape[0], listing.shape[2])
    labels: list[str] = []
    ids: list[str] = []
    units: list[str] = []
    bad: list[tuple[str, str]] = []
    raw_path = scratch / "pixels.u8"
    with open(raw_path, "wb") as raw:
        for unit in listing.units:
            try:
                for image, label, example_id in read_unit(unit, listing):
                    raw.write(image.tobytes())
                    labels.append(label)
                    ids.append(example_id)
                    units.append(unit_key(unit))
            except DataError as exc:
                if unit.kind != "folder":  # a CIFAR batch or TFRecord file: the whole source is suspect
                    raise
                bad.append((unit.uri, why_unreadable(exc)))
    if bad:
        raise unreadable_files(sorted(bad)[:BAD_FILES_SHOWN], len(bad), listing.root)
    pixels = (np.memmap(raw_path, dtype=np.uint8, mode="r", shape=(len(labels), *listing.shape)) if labels
              else np.empty((0, *listing.shape), np.uint8))
    classes = list(listing.classes) if listing.classes is not None else classes_of(labels, listing.root)
    if listing.kind == "cifar" and set(classes) - set(labels):
        log.warning("CIFAR classes without examples in %s: %s", listing.root, sorted(set(classes) - set(labels)))
    if len(ids) != len(set(ids)):
        log.warning("%d duplicate example_id values in %s", len(ids) - len(set(ids)), listing.root)
    return ImageSet(pixels=pixels, labels=labels, ids=ids, classes=classes, units=units)


def why_unreadable(error: DataError) -> str:
    """What made an image file unreadable, in a few words (the decoder's own error when there is one)."""
    cause = error.__cause__
    return f"{type(cause).__name__}: {cause}" if cause else str(error)


def unreadable_files(shown: list[tuple[str, str]], count: int, root: str) -> DataError:
    """One paragraph for every image file that cannot be read (``shown``: the first few, with why), raised
    before any example is written."""
    listed = "; ".join(f"{path} ({why})" for path, why in shown)
    more = count - len(shown)
    return DataError(
        f"{count:,} image file(s) in {root} cannot be read, so no example was written: "
        f"{listed}{f'; and {more:,} more' if more else ''}. Each is not a valid image or is truncated "
        "(e.g. an interrupted copy). Replace them with good copies, or delete them from their class folders."
    )


def classes_of(labels: list[str], root: str) -> list[str]:
    """The sorted class names of TFRecords whose classes are only known once read; at least two."""
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DataError(
            f"The TFRecord files in {root} have only one class ('{classes[0] if classes else ''}'), but a "
            "classifier needs at least two. Add examples of the other classes."
        )
    return classes

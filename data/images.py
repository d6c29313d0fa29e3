"""Turn an image source into cached TFRecords of ``tf.train.Example`` (spec: ``data.features``).

Supported sources, detected from the path:

* ``None``: scikit-learn's bundled 8x8 digits (shipped inside the package, no download);
* a folder with one sub-folder of PNG/JPEG images per class (the sub-folder name is the
  class name), resized to a square ``image_size`` and converted to ``channels``;
* a CIFAR-10 "python version" folder (``batches.meta``, ``data_batch_N``, ``test_batch``),
  the ``cifar-10-batches-py`` folder itself or its parent;
* TFRecord files already in the feature spec (a folder of them or a single file).

The result always goes to ``<cache_root>/<fingerprint[:16]>/`` (see ``data.tfrecords``),
so the pipeline reads one layout whatever the source, and an unchanged source is not
converted again.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import numbers
import os
import pickle
import re
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf
from PIL import Image, ImageOps

from data import features
from data.errors import DataError
from data.tfrecords import (
    MANIFEST_NAME,
    DatasetManifest,
    build_cached,
    file_stats,
    is_tfrecord_path,
    iter_file_examples,
    source_fingerprint,
    write_examples,
)

log = logging.getLogger(__name__)

# Bump when the conversion changes in a way that changes the output for the same input.
FORMAT_VERSION = 1
DEFAULT_IMAGE_SIZE = 32
DEFAULT_CHANNELS = 3
MAX_IMAGE_SIZE = 4096
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
# Shards let Beam read in parallel (GZIP files cannot be split); ~64 MiB of pixels each.
_SHARD_PIXEL_BYTES = 64 << 20
_MAX_SHARDS = 64
_IGNORED_DIRS = {"__MACOSX"}
_CIFAR_BATCH_RE = re.compile(r"^(data_batch_(\d+)|test_batch)$")
_CIFAR_SIDE = 32
_MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}  # PIL mode per channel count


@dataclasses.dataclass
class _ImageSet:
    """Decoded images in their final shape, ready to be written."""

    pixels: np.ndarray  # (N, H, W, C) uint8; may be a disk-backed memmap
    labels: list[str]
    ids: list[str]
    classes: list[str]  # sorted


@dataclasses.dataclass
class _Plan:
    """A detected source: cheap to make (listing + stat only), so cache hits stay cheap."""

    kind: str
    description: str
    fingerprint: str
    load: Callable[[Path], _ImageSet]  # argument: a scratch directory for large buffers
    extra: dict = dataclasses.field(default_factory=dict)


def prepare_image_dataset(
    source: str | os.PathLike | None,
    cache_root: str | os.PathLike,
    image_size: int | None = None,
    channels: int | None = None,
) -> DatasetManifest:
    """Convert ``source`` to TFRecords under ``cache_root`` (or reuse them) and describe them.

    ``image_size`` and ``channels`` (1 or 3) set the output shape; when left out, digits,
    CIFAR and TFRecord sources keep their native shape and folders become 32x32 RGB.
    An empty string as ``source`` means the bundled digits, like ``None``.
    Raises DataError with an actionable message for any bad input.
    """
    image_size, channels = _check_shape_args(image_size, channels)
    plan = _plan(source, image_size, channels)
    manifest, reused = build_cached(
        cache_root, plan.fingerprint, lambda staging: _build(plan, staging)
    )
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
        or not 1 <= image_size <= MAX_IMAGE_SIZE
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






# ------------------------------------------------------------------ source detection


def _plan(source: str | os.PathLike | None, image_size: int | None,
          channels: int | None) -> _Plan:
    if source is None or not str(source).strip():
        return _plan_digits(image_size, channels)
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
            return _plan_tfrecords(path, [path], image_size, channels)
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
    entries = _visible_entries(path)
    cifar_dir = _find_cifar_dir(path)
    if cifar_dir is not None:
        return _plan_cifar(cifar_dir, image_size, channels)
    if any(_CIFAR_BATCH_RE.match(e.name) for e in entries):
        raise DataError(
            f"Folder {path} holds CIFAR-10 batch files but no batches.meta (which has the "
            "class names). Copy batches.meta from the CIFAR-10 python archive into it."
        )
    records = [e for e in entries if e.is_file() and is_tfrecord_path(e)]
    if records:
        return _plan_tfrecords(path, records, image_size, channels)
    return _plan_folder(path, image_size, channels)


def _visible_entries(folder: Path) -> list[Path]:
    """Sorted children of ``folder`` without hidden files and OS metadata folders."""
    try:
        names = sorted(os.listdir(folder))
    except OSError as exc:
        raise DataError(
            f"Cannot list folder {folder} ({exc.strerror}). Check that it is readable by "
            "the user running the pipeline."
        ) from exc
    return [folder / n for n in names if not n.startswith(".") and n not in _IGNORED_DIRS]


# ---------------------------------------------------------------------------- digits


def _plan_digits(image_size: int | None, channels: int | None) -> _Plan:
    import sklearn

    size, ch = image_size or 8, channels or 1

    def load(scratch: Path) -> _ImageSet:
        from sklearn.datasets import load_digits

        digits = load_digits()
        raw = np.rint(np.clip(digits.images, 0, 16) * 255.0 / 16.0).astype(np.uint8)
        labels = [str(int(t)) for t in digits.target]
        return _ImageSet(
            pixels=_convert_all(raw[..., None], (size, size, ch)),
            labels=labels,
            ids=[f"digits/{i:05d}" for i in range(len(labels))],
            classes=sorted(set(labels)),
        )

    return _Plan(
        kind="digits",
        description=f"scikit-learn {sklearn.__version__} bundled digits",
        fingerprint=source_fingerprint(FORMAT_VERSION, "digits", size=size, channels=ch,
                                       sklearn=sklearn.__version__),
        load=load,
    )


# ---------------------------------------------------------------------- class folders


def _plan_folder(root: Path, image_size: int | None, channels: int | None) -> _Plan:
    size, ch = image_size or DEFAULT_IMAGE_SIZE, channels or DEFAULT_CHANNELS
    per_class = _list_class_images(root)
    items = [(cls, path) for cls, paths in per_class.items() for path in paths]

    def load(scratch: Path) -> _ImageSet:
        pixels = np.lib.format.open_memmap(
            scratch / "pixels.npy", mode="w+", dtype=np.uint8, shape=(len(items), size, size, ch)
        )
        for i, (_, path) in enumerate(items):
            pixels[i] = _load_image_file(path, (size, size, ch))
        return _ImageSet(
            pixels=pixels,
            labels=[cls for cls, _ in items],
            ids=[path.relative_to(root).as_posix() for _, path in items],
            classes=list(per_class),
        )

    return _Plan(
        kind="folder",
        description=f"image folder {root}",
        fingerprint=source_fingerprint(
            FORMAT_VERSION,
            "folder", size=size, channels=ch, root=str(root),
            files=file_stats([p for _, p in items], root),
        ),
        load=load,
        extra={"source_path": str(root)},
    )


def _list_class_images(root: Path) -> dict[str, list[Path]]:
    """Sorted class name -> sorted image files (searched recursively), with input checks."""
    entries = _visible_entries(root)
    class_dirs = [e for e in entries if e.is_dir()]
    if not class_dirs:
        if any(e.suffix.lower() in IMAGE_SUFFIXES for e in entries):
            raise DataError(
                f"Folder {root} holds images directly, but images must be grouped in one "
                "sub-folder per class (e.g. cats/ and dogs/), the sub-folder name being the "
                "class name. Move each image into the sub-folder of its class."
            )
        what = "is empty" if not entries else "has no class sub-folders"
        raise DataError(
            f"Image folder {root} {what}. Put the images in one sub-folder per class (e.g. "
            f"{root}/cats/*.png and {root}/dogs/*.png), with at least two classes."
        )
    per_class: dict[str, list[Path]] = {}
    for class_dir in class_dirs:
        images = _find_images(class_dir)
        if not images:
            raise DataError(
                f"Class folder {class_dir} contains no images (files ending in "
                f"{', '.join(IMAGE_SUFFIXES)}). Add images of class '{class_dir.name}' to "
                "it, or remove the folder if it is not a class."
            )
        per_class[class_dir.name] = images
    if len(per_class) < 2:
        raise DataError(
            f"Image folder {root} has only one class ('{class_dirs[0].name}'), but a "
            "classifier needs at least two. Add a sub-folder of images for each other class."
        )
    return per_class


def _find_images(folder: Path) -> list[Path]:
    found, ignored = [], 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(
            d for d in dirnames if not d.startswith(".") and d not in _IGNORED_DIRS
        )
        for name in sorted(filenames):
            if name.startswith("."):
                continue
            if name.lower().endswith(IMAGE_SUFFIXES):
                found.append(Path(dirpath) / name)
            else:
                ignored += 1
    if ignored:
        log.debug("Ignored %d non-image files in %s", ignored, folder)
    return found


def load_image_array(path: str | os.PathLike, size: int | tuple[int, int],
                     channels: int) -> np.ndarray:
    """Decode one image file to uint8 (H, W, channels) exactly as folder sources are.

    For prediction on new files: the same mode handling and resizing as in training
    avoids a silent train/serving skew. ``size`` is a side or (height, width).
    """
    height, width = (size, size) if isinstance(size, numbers.Integral) else size
    if channels not in (1, 3):
        raise DataError(f"Channels {channels!r} is not valid: use 1 (grayscale) or 3 (RGB).")
    return _load_image_file(Path(path), (int(height), int(width), int(channels)))


def _load_image_file(path: Path, shape: tuple[int, int, int]) -> np.ndarray:
    try:
        with Image.open(path) as img:
            img.load()  # Decode now: truncated files fail here, not later.
            return _to_array(ImageOps.exif_transpose(img), shape)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, ...
        raise DataError(
            f"Image file {path} cannot be read ({type(exc).__name__}: {exc}). It is not a "
            "valid image or is truncated (e.g. an interrupted copy). Replace it with a good "
            "copy, or delete it from the class folder."
        ) from exc


# --------------------------------------------------------------------- pixel handling


def _to_array(img: Image.Image, shape: tuple[int, int, int]) -> np.ndarray:
    """Any PIL image -> uint8 array of ``shape`` (H, W, 1 or 3); alpha is composited on white."""
    height, width, channels = shape
    img = _to_l_or_rgb(img)
    img = img.convert("L" if channels == 1 else "RGB")
    if img.size != (width, height):
        # Stretch to a square, like Keras' image_dataset_from_directory; Pillow's bilinear
        # filter widens its support when shrinking, so downscaling averages the area.
        img = img.resize((width, height), Image.Resampling.BILINEAR)
    arr = np.asarray(img, dtype=np.uint8)
    return arr[:, :, None] if arr.ndim == 2 else arr


def _to_l_or_rgb(img: Image.Image) -> Image.Image:
    mode = img.mode
    if mode in ("L", "RGB"):
        return img
    if mode == "1":
        return img.convert("L")
    if mode.startswith("I") or mode == "F":
        return Image.fromarray(_wide_to_uint8(np.asarray(img), mode), "L")
    if mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif mode in ("PA", "LA", "La", "RGBa"):
        img = img.convert("RGBA")
    if img.mode == "RGBA":
        background = Image.new("RGBA", img.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, img).convert("RGB")
    return img.convert("RGB")  # CMYK, YCbCr, LAB, HSV


def _wide_to_uint8(arr: np.ndarray, mode: str) -> np.ndarray:
    """16/32-bit integer or float grayscale -> 0..255 (16-bit data is scaled down)."""
    values = arr.astype(np.float64)
    if mode.startswith("I;16") or (mode == "I" and values.max(initial=0) > 255):
        values = values / 257.0
    elif mode == "F" and values.max(initial=0) <= 1.0:
        values = values * 255.0
    return np.rint(np.clip(values, 0, 255)).astype(np.uint8)


def _convert_array(arr: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """uint8 HWC (1 to 4 channels) -> uint8 ``shape``, through PIL for resizing / colour."""
    if arr.shape == shape:
        return arr
    img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr, _MODES[arr.shape[2]])
    return _to_array(img, shape)


def _convert_all(raw: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    if raw.shape[1:] == shape:
        return raw
    out = np.empty((len(raw), *shape), dtype=np.uint8)
    for i, arr in enumerate(raw):
        out[i] = _convert_array(arr, shape)
    return out


# ----------------------------------------------------------------------------- CIFAR


def _find_cifar_dir(folder: Path) -> Path | None:
    for candidate in (folder, folder / "cifar-10-batches-py"):
        if (candidate / "batches.meta").is_file() and _cifar_batches(candidate):
            return candidate
    return None


def _cifar_batches(folder: Path) -> list[Path]:
    """data_batch_1..N in numeric order, then test_batch."""
    found = [(m, folder / n) for n in os.listdir(folder) if (m := _CIFAR_BATCH_RE.match(n))]
    found = [(m, p) for m, p in found if p.is_file()]
    found.sort(key=lambda mp: (mp[0].group(2) is None, int(mp[0].group(2) or 0)))
    return [p for _, p in found]


class _CifarUnpickler(pickle.Unpickler):
    """Loads only numpy arrays and plain data: a batch file cannot run arbitrary code."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"),
    }

    def find_class(self, module: str, name: str):
        if (module, name) not in self._ALLOWED:
            raise pickle.UnpicklingError(f"unexpected object {module}.{name} in the pickle")
        return super().find_class(module, name)


def _unpickle_cifar(path: Path, keys: tuple[bytes, ...]) -> dict:
    try:
        with open(path, "rb") as f:
            obj = _CifarUnpickler(f, encoding="bytes").load()
        missing = [k.decode() for k in keys if k not in obj]
        if missing:
            raise KeyError(f"missing key(s) {', '.join(missing)}")
        return obj
    except Exception as exc:
        raise DataError(
            f"CIFAR-10 file {path} cannot be read ({type(exc).__name__}: {exc}). Expected a "
            f"pickled dict with keys {', '.join(k.decode() for k in keys)} as in the CIFAR-10 "
            "python version; re-extract cifar-10-python.tar.gz if the file is damaged."
        ) from exc


def _plan_cifar(folder: Path, image_size: int | None, channels: int | None) -> _Plan:
    size, ch = image_size or _CIFAR_SIDE, channels or 3
    batches = _cifar_batches(folder)
    meta_path = folder / "batches.meta"

    def load(scratch: Path) -> _ImageSet:
        names = [
            n.decode() if isinstance(n, bytes) else str(n)
            for n in _unpickle_cifar(meta_path, (b"label_names",))[b"label_names"]
        ]
        if len(set(names)) != len(names) or not names:
            raise DataError(
                f"CIFAR-10 file {meta_path} has empty or repeated label names {names}; "
                "each class needs a distinct name. Re-extract the CIFAR-10 archive."
            )
        parts, labels, ids = [], [], []
        for path in batches:
            data, batch_labels = _read_cifar_batch(path, len(names))
            parts.append(_convert_all(data, (size, size, ch)))
            labels += [names[i] for i in batch_labels]
            ids += [f"cifar/{path.name}/{i}" for i in range(len(batch_labels))]
        pixels = parts[0] if len(parts) == 1 else np.concatenate(parts)
        classes = sorted(names)
        empty = sorted(set(classes) - set(labels))
        if empty:
            log.warning("CIFAR classes without examples in %s: %s", folder, empty)
        return _ImageSet(pixels=pixels, labels=labels, ids=ids, classes=classes)

    return _Plan(
        kind="cifar",
        description=f"CIFAR-10 batches {folder}",
        fingerprint=source_fingerprint(
            FORMAT_VERSION,
            "cifar", size=size, channels=ch, root=str(folder),
            files=file_stats([meta_path, *batches], folder),
        ),
        load=load,
        extra={"source_path": str(folder), "cifar_batches": [p.name for p in batches]},
    )


def _read_cifar_batch(path: Path, num_classes: int) -> tuple[np.ndarray, list[int]]:
    """-> (N, 32, 32, 3) uint8 HWC images and integer labels."""
    batch = _unpickle_cifar(path, (b"data", b"labels"))
    data = np.asarray(batch[b"data"])
    labels = [int(v) for v in batch[b"labels"]]
    side = _CIFAR_SIDE
    problem = None
    if data.ndim != 2 or data.shape[1] != 3 * side * side:
        problem = f"data has shape {data.shape}, expected (N, {3 * side * side})"
    elif data.dtype != np.uint8 and (data.min(initial=0) < 0 or data.max(initial=0) > 255):
        problem = "pixel values outside 0..255"
    elif len(labels) != len(data):
        problem = f"{len(labels)} labels for {len(data)} images"
    elif any(not 0 <= v < num_classes for v in labels):
        problem = f"labels outside 0..{num_classes - 1} (batches.meta lists {num_classes} names)"
    if problem:
        raise DataError(
            f"CIFAR-10 batch {path} is not in the expected format: {problem}. Use the "
            "batches of the CIFAR-10 python version (cifar-10-python.tar.gz)."
        )
    # Rows are channel-major: 1024 red, then 1024 green, then 1024 blue values.
    images = data.astype(np.uint8).reshape(-1, 3, side, side).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


# -------------------------------------------------------------------------- TFRecords


def _plan_tfrecords(root: Path, files: list[Path], image_size: int | None,
                    channels: int | None) -> _Plan:
    base = root if root.is_dir() else root.parent

    def load(scratch: Path) -> _ImageSet:
        return _load_tfrecords(base, files, scratch, image_size, channels)

    return _Plan(
        kind="tfrecord",
        description=f"TFRecord files {root}",
        fingerprint=source_fingerprint(
            FORMAT_VERSION,
            "tfrecord", size=image_size, channels=channels, root=str(root),
            files=file_stats(files, base),
        ),
        load=load,
        extra={"source_path": str(root)},
    )


def _load_tfrecords(base: Path, files: list[Path], scratch: Path, image_size: int | None,
                    channels: int | None) -> _ImageSet:
    """Check every record and copy the raw pixels to a scratch file in one read."""
    labels, ids, length = [], [], None
    raw_path = scratch / "raw.u8"
    with open(raw_path, "wb") as raw:
        for path in files:
            for index, example in enumerate(iter_file_examples(path)):
                label, example_id, pixels = _parse_record(example, path, index)
                if length is None:
                    length = len(pixels)
                elif len(pixels) != length:
                    raise DataError(
                        f"Record {index} of TFRecord file {path} has an image of {len(pixels)} "
                        f"values, but earlier records have {length}. All images must have the "
                        "same shape: resize them to one size before writing the TFRecords."
                    )
                raw.write(pixels.tobytes())
                labels.append(label)
                ids.append(example_id or f"{path.relative_to(base).as_posix()}/{index}")
    if not labels:
        raise DataError(
            f"The TFRecord files in {base} hold no records. Write the examples again, or "
            "point the source at the folder that holds the real data."
        )
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DataError(
            f"The TFRecord files in {base} have only one class ('{classes[0]}'), but a "
            "classifier needs at least two. Add examples of the other classes."
        )
    duplicates = len(ids) - len(set(ids))
    if duplicates:
        log.warning("%d duplicate example_id values in %s", duplicates, base)
    shape = _source_shape(base, length, image_size, channels)
    raw = np.memmap(raw_path, dtype=np.uint8, mode="r", shape=(len(labels), *shape))
    target = (image_size or shape[0], image_size or shape[1], channels or shape[2])
    if target == shape:
        return _ImageSet(pixels=raw, labels=labels, ids=ids, classes=classes)
    if shape[2] not in _MODES:
        raise DataError(
            f"Images in {base} have {shape[2]} channels, which cannot be resized or "
            "converted. Leave out --image-size and --channels to keep them as they are."
        )
    out = np.lib.format.open_memmap(
        scratch / "pixels.npy", mode="w+", dtype=np.uint8, shape=(len(labels), *target)
    )
    for i in range(len(labels)):
        out[i] = _convert_array(np.asarray(raw[i]), target)
    return _ImageSet(pixels=out, labels=labels, ids=ids, classes=classes)


def _parse_record(example: tf.train.Example, path: Path, index: int
                  ) -> tuple[str, str | None, np.ndarray]:
    feature = example.features.feature
    where = f"Record {index} of TFRecord file {path}"
    spec = (
        f"Each record needs '{features.IMAGE}' (int64 list of pixel values 0..255, HWC "
        f"order) and '{features.LABEL}' (bytes, the class name); see data/features.py."
    )
    image = feature.get(features.IMAGE)
    if image is None or image.WhichOneof("kind") != "int64_list" or not image.int64_list.value:
        found = "missing" if image is None else f"a {image.WhichOneof('kind')}"
        raise DataError(f"{where} has no usable '{features.IMAGE}' feature ({found}). {spec}")
    label = feature.get(features.LABEL)
    if label is None or label.WhichOneof("kind") != "bytes_list" or not label.bytes_list.value:
        raise DataError(f"{where} has no usable '{features.LABEL}' feature. {spec}")
    pixels = np.asarray(image.int64_list.value, dtype=np.int64)
    if pixels.min() < 0 or pixels.max() > 255:
        raise DataError(f"{where} has pixel values outside 0..255. {spec}")
    try:
        name = label.bytes_list.value[0].decode("utf-8")
        example_id = None
        if features.EXAMPLE_ID in feature and feature[features.EXAMPLE_ID].bytes_list.value:
            example_id = feature[features.EXAMPLE_ID].bytes_list.value[0].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{where} has a label or example_id that is not UTF-8 text. {spec}"
        ) from exc
    return name, example_id, pixels.astype(np.uint8)


def _source_shape(base: Path, length: int, image_size: int | None,
                  channels: int | None) -> tuple[int, int, int]:
    """[H, W, C] of TFRecord images: manifest.json beside them, else the flags, else inferred."""
    manifest_path = base / MANIFEST_NAME
    if manifest_path.is_file():
        try:
            shape = [int(v) for v in json.loads(manifest_path.read_text())["image_shape"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(
                f"{manifest_path} has no valid image_shape ({exc}). Fix or delete it; "
                "without it the shape is inferred or taken from --image-size/--channels."
            ) from exc
        if len(shape) != 3 or math.prod(shape) != length or min(shape) < 1:
            raise DataError(
                f"{manifest_path} gives image_shape {shape}, but the images in the "
                f"TFRecords have {length} values. Fix or delete the manifest."
            )
        return shape[0], shape[1], shape[2]
    for side, ch in _shape_candidates(length, image_size, channels):
        return side, side, ch
    raise DataError(
        f"Cannot tell the image shape of the TFRecords in {base}: images have {length} values, "
        "which is not a square with 1 or 3 channels. Pass --image-size and --channels "
        f"matching the stored images, or put a manifest.json with \"image_shape\": [H, W, C] "
        "beside the files."
    )


def _shape_candidates(length: int, image_size: int | None,
                      channels: int | None) -> Iterator[tuple[int, int]]:
    """(side, channels) pairs consistent with ``length``, the given flags first."""
    options = []
    if image_size and channels:
        options.append((image_size, channels))
    if channels:
        options.append((math.isqrt(length // channels), channels))
    if image_size:
        options.append((image_size, length // (image_size * image_size)))
    options += [(math.isqrt(length), 1), (math.isqrt(length // 3), 3)]
    for side, ch in options:
        if side > 0 and ch > 0 and side * side * ch == length:
            yield side, ch


# ----------------------------------------------------------------------------- output


def _build(plan: _Plan, staging: Path) -> DatasetManifest:
    scratch = staging.parent / "scratch"
    scratch.mkdir()
    images = plan.load(scratch)
    means = _mean_intensities(images.pixels)
    thresholds = [float(t) for t in np.quantile(means, [1 / 3, 2 / 3])]
    buckets = np.where(means <= thresholds[0], 0, np.where(means <= thresholds[1], 1, 2))
    pixel_bytes = images.pixels.size
    num_shards = min(_MAX_SHARDS, max(1, math.ceil(pixel_bytes / _SHARD_PIXEL_BYTES)))
    count = write_examples(_examples(images, buckets), staging, num_shards)
    counts = collections.Counter(images.labels)
    return DatasetManifest(
        kind="image",
        source=plan.description,
        num_examples=count,
        classes=images.classes,
        class_counts={c: counts.get(c, 0) for c in images.classes},
        image_shape=[int(v) for v in images.pixels.shape[1:]],
        fingerprint=plan.fingerprint,
        examples_dir=str(staging),
        extra={
            "source_kind": plan.kind,
            "format_version": FORMAT_VERSION,
            "brightness_thresholds": thresholds,
            "brightness_counts": {
                b: int((buckets == i).sum()) for i, b in enumerate(features.BRIGHTNESS_BUCKETS)
            },
            **plan.extra,
        },
    )


def _mean_intensities(pixels: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Per-image mean pixel value, in chunks so a disk-backed array is never copied whole."""
    means = np.empty(len(pixels), dtype=np.float64)
    for start in range(0, len(pixels), chunk):
        block = np.asarray(pixels[start:start + chunk])
        means[start:start + len(block)] = block.reshape(len(block), -1).mean(axis=1)
    return means


def _examples(images: _ImageSet, buckets: np.ndarray) -> Iterator[tf.train.Example]:
    index = {name: i for i, name in enumerate(images.classes)}
    for i, label in enumerate(images.labels):
        yield make_example(
            images.pixels[i], label, index[label],
            features.BRIGHTNESS_BUCKETS[int(buckets[i])], images.ids[i],
        )


def make_example(pixels: np.ndarray, label: str, label_id: int, brightness: str,
                 example_id: str) -> tf.train.Example:
    """One tf.train.Example in the spec of ``data.features``."""
    def int64(values: list[int]) -> tf.train.Feature:
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    def text(value: str) -> tf.train.Feature:
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode("utf-8")]))

    return tf.train.Example(features=tf.train.Features(feature={
        features.IMAGE: int64(np.asarray(pixels, dtype=np.uint8).ravel().tolist()),
        features.LABEL: text(label),
        features.LABEL_ID: int64([label_id]),
        features.BRIGHTNESS: text(brightness),
        features.EXAMPLE_ID: text(example_id),
    }))

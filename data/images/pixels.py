"""Pixel conversion: any decoded image to uint8 (H, W, 1 or 3), the same for every source.

Training sources and prediction on new files (``load_image_array``) go through the same
functions, so the mode handling and resizing cannot drift apart into train/serving skew.
"""
from __future__ import annotations

import io
import numbers
import os
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from data.errors import DataError

MODES = {1: "L", 2: "LA", 3: "RGB", 4: "RGBA"}  # PIL mode per channel count


def load_image_array(path: str | os.PathLike, size: int | tuple[int, int],
                     channels: int) -> np.ndarray:
    """Decode one image file to uint8 (H, W, channels) exactly as folder sources are.

    For prediction on new files: the same mode handling and resizing as in training
    avoids a silent train/serving skew. ``size`` is a side or (height, width).
    """
    height, width = (size, size) if isinstance(size, (int, numbers.Integral)) else size  # Integral: numpy ints
    if channels not in (1, 3):
        raise DataError(f"Channels {channels!r} is not valid: use 1 (grayscale) or 3 (RGB).")
    return load_image_file(Path(path), (int(height), int(width), int(channels)), remedy=PREDICT_REMEDY)


PREDICT_REMEDY = "Pass an image file (PNG, JPEG, GIF, WebP, BMP or TIFF) instead."


def check_image_file(path: str | os.PathLike) -> None:
    """DataError (``predict``'s wording) unless Pillow recognises ``path`` as an image: cheap
    (the header), so a wrong file costs no model load."""
    try:
        with Image.open(path) as img:
            img.verify()
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, ...
        raise DataError(f"Image file {path} cannot be read ({type(exc).__name__}: {exc}). It is not a valid "
                        f"image or is truncated (e.g. an interrupted copy). {PREDICT_REMEDY}") from exc


#: What to do about an unreadable file found in a training data folder.
DATA_FOLDER_REMEDY = "Replace it with a good copy, or delete it from the class folder."


def open_binary(name: str):
    """A file for reading bytes: a local one through Python's own open (TF's GFile reads cost ~10x more
    for a small file), a ``tf.io.gfile`` URI through GFile."""
    if "://" not in name:
        return open(name, "rb")
    import tensorflow as tf  # here: predict on a local file does not need TensorFlow's start-up

    return tf.io.gfile.GFile(name, "rb")


def load_image_file(path: Path | str, shape: tuple[int, int, int], remedy: str = DATA_FOLDER_REMEDY) -> np.ndarray:
    """Decode one image file (a local path or any ``tf.io.gfile`` URI, e.g. ``gs://``); an
    animated image gives its first frame. ``remedy``: the paragraph's last sentence."""
    try:
        # Bytes first, then decode from memory: PIL reading through a GFile makes several small
        # reads and seeks per file, each through TF's Python wrappers (more than the decode of a
        # small image costs: docs/history/benchmarks-log.md, "At scale"), and a GFile raises OutOfRangeError
        # at the end of the file where Pillow's WebP reader expects read() to return b"".
        with open_binary(str(path)) as handle:
            data = handle.read()
        with Image.open(io.BytesIO(data)) as img:
            img.load()  # Decode now: truncated files fail here, not later.
            return to_array(_upright(img), shape)
    except Exception as exc:  # PIL raises OSError, SyntaxError, ValueError, ...
        raise DataError(
            f"Image file {path} cannot be read ({type(exc).__name__}: {exc}). It is not a "
            f"valid image or is truncated (e.g. an interrupted copy). {remedy}"
        ) from exc


def _upright(img: Image.Image) -> Image.Image:
    """The image turned as its EXIF orientation says. A PNG without an eXIf chunk (read by
    ``load``) has no orientation: skipping the EXIF parse saves time on small files."""
    if img.format == "PNG" and "exif" not in img.info:
        return img
    return ImageOps.exif_transpose(img)


def to_array(img: Image.Image, shape: tuple[int, int, int]) -> np.ndarray:
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


def convert_array(arr: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    """uint8 HWC (1 to 4 channels) -> uint8 ``shape``, through PIL for resizing / colour."""
    if arr.shape == shape:
        return arr
    img = Image.fromarray(arr[:, :, 0] if arr.shape[2] == 1 else arr, MODES[arr.shape[2]])
    return to_array(img, shape)


def convert_all(raw: np.ndarray, shape: tuple[int, int, int]) -> np.ndarray:
    if raw.shape[1:] == shape:
        return raw
    out = np.empty((len(raw), *shape), dtype=np.uint8)
    for i, arr in enumerate(raw):
        out[i] = convert_array(arr, shape)
    return out


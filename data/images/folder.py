"""Source reader: a folder with one sub-folder of images per class (``listing.IMAGE_SUFFIXES``).

The sub-folder name is the class name; images are searched recursively, resized to a
square ``image_size`` and converted to ``channels``.
"""
from __future__ import annotations

from collections.abc import Sequence

from PIL import Image

from data.images.listing import IGNORED_DIRS, IMAGE_SUFFIXES, Unused, list_class_files  # noqa: F401  (re-exported)
from data.images.pixels import open_binary

DEFAULT_IMAGE_SIZE = 32
DEFAULT_CHANNELS = 3
#: How many images' headers decide a folder's default shape (evenly spaced over its files).
SHAPE_SAMPLE = 64
_GRAYSCALE_MODES = frozenset({"1", "L", "LA", "I", "I;16", "F"})


def default_shape(files: Sequence[str], image_size: int | None, channels: int | None) -> tuple[int, int]:
    """The side and channels a folder's images become: the flags when given; else 32x32 RGB, but never
    larger than the images themselves nor in colour when they are all grayscale.

    Judged from the headers of up to ``SHAPE_SAMPLE`` files spread over the folder (nothing is
    decoded), by both ingestion paths alike. Why: 28x28 grayscale digits trained as a 32x32 RGB
    copy cost about four times the pixels for nothing (docs/history/benchmarks-log.md, "Against TFX's own
    example"); a side larger than 32 stays 32, the size the CNN's defaults were measured at.
    """
    if image_size and channels:
        return image_size, channels
    sides, modes = [], set()
    for path in list(files)[::max(1, len(files) // SHAPE_SAMPLE)][:SHAPE_SAMPLE]:
        try:
            with open_binary(str(path)) as handle, Image.open(handle) as img:
                sides.append(max(img.size))
                modes.add(img.mode)
        except Exception:  # noqa: BLE001 - an unreadable file is named when the images are read
            continue
    size = image_size or (max(2, min(DEFAULT_IMAGE_SIZE, max(sides))) if sides else DEFAULT_IMAGE_SIZE)
    return size, channels or (1 if modes and modes <= _GRAYSCALE_MODES else DEFAULT_CHANNELS)



"""Source reader: a folder with one sub-folder of PNG/JPEG images per class.

The sub-folder name is the class name; images are searched recursively, resized to a
square ``image_size`` and converted to ``channels``.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from data.errors import DataError
from data.images.pixels import load_image_file
from data.images.writer import FORMAT_VERSION, ImageSet
from data.prepare import SourcePlan, file_stats, find_files, source_fingerprint, visible_entries

log = logging.getLogger(__name__)

DEFAULT_IMAGE_SIZE = 32
DEFAULT_CHANNELS = 3
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
IGNORED_DIRS = frozenset({"__MACOSX"})  # OS metadata folders, never classes


def plan_folder(root: Path, image_size: int | None, channels: int | None) -> SourcePlan[ImageSet]:
    size, ch = image_size or DEFAULT_IMAGE_SIZE, channels or DEFAULT_CHANNELS
    per_class = _list_class_images(root)
    items = [(cls, path) for cls, paths in per_class.items() for path in paths]

    def load(scratch: Path) -> ImageSet:
        pixels = np.lib.format.open_memmap(
            scratch / "pixels.npy", mode="w+", dtype=np.uint8, shape=(len(items), size, size, ch)
        )
        for i, (_, path) in enumerate(items):
            pixels[i] = load_image_file(path, (size, size, ch))
        return ImageSet(
            pixels=pixels,
            labels=[cls for cls, _ in items],
            ids=[path.relative_to(root).as_posix() for _, path in items],
            classes=list(per_class),
        )

    return SourcePlan(
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
    entries = visible_entries(root, IGNORED_DIRS)
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
    found, ignored = find_files(folder, IMAGE_SUFFIXES, IGNORED_DIRS)
    if ignored:
        log.debug("Ignored %d non-image files in %s", ignored, folder)
    return found

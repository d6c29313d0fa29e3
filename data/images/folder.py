"""Source reader: a folder with one sub-folder of images per class (``listing.IMAGE_SUFFIXES``).

The sub-folder name is the class name; images are searched recursively, resized to a
square ``image_size`` and converted to ``channels``.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from data.images.listing import IGNORED_DIRS, IMAGE_SUFFIXES, Unused, list_class_files  # noqa: F401  (re-exported)
from data.images.pixels import load_image_file
from data.images.writer import FORMAT_VERSION, ImageSet
from data.prepare import SourcePlan, file_stats, source_fingerprint
from data.walk import printable

DEFAULT_IMAGE_SIZE = 32
DEFAULT_CHANNELS = 3


def plan_folder(root: Path, image_size: int | None, channels: int | None,
                follow_links: bool = False) -> SourcePlan[ImageSet]:
    size, ch = image_size or DEFAULT_IMAGE_SIZE, channels or DEFAULT_CHANNELS
    unused = Unused()
    per_class = {name: [Path(f) for f in files]
                 for name, files in list_class_files(str(root), unused, follow_links).items()}
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
            ids=[printable(path.relative_to(root).as_posix()) for _, path in items],
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
        extra={"source_path": str(root), **({"unused": unused.facts()} if unused else {})},
    )

"""Source reader: scikit-learn's bundled 8x8 digits (shipped inside the package, no download)."""
from __future__ import annotations

import numpy as np

from data.images.pixels import convert_all
from data.images.writer import ImageSet


def digit_images(size: int, channels: int) -> ImageSet:
    """The digits at ``size`` x ``size`` x ``channels`` (held in memory: no scratch directory needed)."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    raw = np.rint(np.clip(digits.images, 0, 16) * 255.0 / 16.0).astype(np.uint8)
    labels = [str(int(t)) for t in digits.target]
    return ImageSet(
        pixels=convert_all(raw[..., None], (size, size, channels)),
        labels=labels,
        ids=[f"digits/{i:05d}" for i in range(len(labels))],
        classes=sorted(set(labels)),
        units=[""] * len(labels),  # one unit, as the ExampleGen reads it
    )

"""Source reader: scikit-learn's bundled 8x8 digits (shipped inside the package, no download)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from data.images.pixels import convert_all
from data.images.writer import FORMAT_VERSION, ImageSet
from data.prepare import SourcePlan, source_fingerprint


def plan_digits(image_size: int | None, channels: int | None) -> SourcePlan[ImageSet]:
    import sklearn

    size, ch = image_size or 8, channels or 1

    def load(scratch: Path) -> ImageSet:
        return digit_images(size, ch)

    return SourcePlan(
        kind="digits",
        description=f"scikit-learn {sklearn.__version__} bundled digits",
        fingerprint=source_fingerprint(FORMAT_VERSION, "digits", size=size, channels=ch,
                                       sklearn=sklearn.__version__),
        load=load,
    )


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

"""The brightness slice (dark / medium / bright): one rule for the prepare step and the ExampleGen.

An image's slice is where its mean pixel value falls among the tertiles (1/3 and 2/3
quantiles) of the image means of a *sample* of the source. Why a sample, not every image:
exact tertiles of every image are known only once every image has been read, so the
ExampleGen had to read everything before writing its first example (two passes, or the
decoded pixels parked on disk). Tertiles of a few thousand images differ from the exact
ones by a fraction of a grey level, which moves only images lying that close to a bound,
and a slice only has to split the data in roughly equal, stable parts for TFMA; the
ExampleGen can then read the sample first and write every image straight after decoding
it. A source no larger than the sample gets the exact tertiles, as before.

Why not fixed bins on the mean (e.g. 0-85, 85-170, 170-255): they do not depend on the
data, but dark data (the bundled digits, most scans) falls in one bin, and a one-slice
"slice" tells TFMA nothing.

Why this sample: units (an image file, a CIFAR batch, a TFRecord file) are ranked by a
seeded hash of their name relative to the source, and the sample is the first
``SAMPLE_SIZE`` images in that order (a unit's images in their stored order). The rule
depends only on names and the stored order, never on the machine's listing order or on
which worker reads what, so the prepare step and the ExampleGen pick the same images,
the same folder gets the same slices on every run, and a folder's sample is spread over
all its classes. The ExampleGen writes the units in the same order (its seeded random
write order), so the sample is simply the head of what it reads.
"""
from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np

from data import features

#: Images whose means decide the tertiles: enough that the bounds are stable, few enough
#: that reading them before the rest costs little and holding them decoded is bounded.
SAMPLE_SIZE = 4096
#: Salt of the rank hash: changing it changes every sample (and every slice).
_SEED = b"brightness-v1"


def unit_rank(unit_key: str) -> bytes:
    """The seeded rank of a unit by its name relative to the source (smaller: read first)."""
    return hashlib.blake2b(unit_key.encode("utf-8", "surrogateescape"), digest_size=8, key=_SEED).digest()


def image_mean(pixels: np.ndarray) -> float:
    """One image's mean pixel value: the exact integer sum over the pixel count, one rounding
    (what ``numpy.mean`` gives for uint8 pixels too: every partial sum is exact in float64)."""
    array = np.asarray(pixels)
    return int(array.sum(dtype=np.uint64)) / array.size


def image_means(pixels: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Per-image means of (N, H, W, C) pixels, as :func:`image_mean` computes each (to the bit),
    in chunks so a disk-backed array is never copied whole."""
    means = np.empty(len(pixels), dtype=np.float64)
    for start in range(0, len(pixels), chunk):
        block = np.asarray(pixels[start:start + chunk])
        means[start:start + len(block)] = block.reshape(len(block), -1).sum(axis=1, dtype=np.uint64) / block[0].size
    return means


def thresholds(sample_means) -> list[float]:
    """The 1/3 and 2/3 quantiles of the sample's image means: the slices' bounds."""
    return [float(t) for t in np.quantile(np.asarray(sample_means, dtype=np.float64), [1 / 3, 2 / 3])]


def sample_thresholds(means: np.ndarray, units: Sequence[str]) -> list[float]:
    """The bounds from a whole source held at once (the prepare step): ``means[i]`` is image
    i's mean and ``units[i]`` the unit it was read from, in each unit's stored order."""
    ranks = np.asarray([int.from_bytes(unit_rank(key), "big") for key in units], dtype=np.uint64)
    order = np.lexsort((np.arange(len(ranks)), ranks))  # by rank, then the stored order
    return thresholds(np.asarray(means)[order[:SAMPLE_SIZE]])


def bucket(mean: float, bounds: Sequence[float]) -> str:
    """``dark`` / ``medium`` / ``bright`` for an image of this mean pixel value."""
    index = 0 if mean <= bounds[0] else 1 if mean <= bounds[1] else 2
    return features.BRIGHTNESS_BUCKETS[index]

"""Source reader: the CIFAR-10 "python version" batches.

Accepts the ``cifar-10-batches-py`` folder itself or its parent (``batches.meta``,
``data_batch_N``, ``test_batch``). Batches are unpickled with an allow-list, so a batch
file cannot run arbitrary code.
"""
from __future__ import annotations

import logging
import pickle
import re
from pathlib import Path

import numpy as np
import tensorflow as tf

from data.errors import DataError
from data.images.listing import join, visible_names
from data.images.pixels import convert_all
from data.images.writer import FORMAT_VERSION, ImageSet
from data.prepare import SourcePlan, file_stats, source_fingerprint
from data.walk import isdir

log = logging.getLogger(__name__)

CIFAR_BATCH_RE = re.compile(r"^(data_batch_(\d+)|test_batch)$")
_CIFAR_SIDE = 32


def find_cifar_dir(folder: str) -> str | None:
    """``folder`` or its ``cifar-10-batches-py`` when it holds batches and ``batches.meta`` (any
    tf.io.gfile path: both ingestion paths ask this)."""
    for candidate in (folder, join(folder, "cifar-10-batches-py")):
        if isdir(candidate) and cifar_batches(candidate) and tf.io.gfile.exists(join(candidate, "batches.meta")):
            return candidate
    return None


def cifar_batches(folder: str) -> list[str]:
    """data_batch_1..N in numeric order, then test_batch."""
    found = [(m, n) for n in visible_names(folder) if (m := CIFAR_BATCH_RE.match(n)) and not isdir(join(folder, n))]
    found.sort(key=lambda mn: (mn[0].group(2) is None, int(mn[0].group(2) or 0)))
    return [join(folder, n) for _, n in found]


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


def _unpickle_cifar(path: Path | str, keys: tuple[bytes, ...]) -> dict:
    import tensorflow as tf  # any tf.io.gfile URI (gs://, s3://) as well as a local path

    try:
        with tf.io.gfile.GFile(str(path), "rb") as f:
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


def plan_cifar(folder: Path, image_size: int | None, channels: int | None) -> SourcePlan[ImageSet]:
    size, ch = image_size or _CIFAR_SIDE, channels or 3
    batches = [Path(p) for p in cifar_batches(str(folder))]
    meta_path = folder / "batches.meta"

    def load(scratch: Path) -> ImageSet:
        names = [
            n.decode() if isinstance(n, bytes) else str(n)
            for n in _unpickle_cifar(meta_path, (b"label_names",))[b"label_names"]
        ]
        if len(set(names)) != len(names) or not names:
            raise DataError(
                f"CIFAR-10 file {meta_path} has empty or repeated label names {names}; "
                "each class needs a distinct name. Re-extract the CIFAR-10 archive."
            )
        parts, labels, ids, units = [], [], [], []
        for path in batches:
            data, batch_labels = _read_cifar_batch(path, len(names))
            parts.append(convert_all(data, (size, size, ch)))
            labels += [names[i] for i in batch_labels]
            ids += [f"cifar/{path.name}/{i}" for i in range(len(batch_labels))]
            units += [path.name] * len(batch_labels)
        pixels = parts[0] if len(parts) == 1 else np.concatenate(parts)
        classes = sorted(names)
        empty = sorted(set(classes) - set(labels))
        if empty:
            log.warning("CIFAR classes without examples in %s: %s", folder, empty)
        return ImageSet(pixels=pixels, labels=labels, ids=ids, classes=classes, units=units)

    return SourcePlan(
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


def _read_cifar_batch(path: Path | str, num_classes: int) -> tuple[np.ndarray, list[int]]:
    """-> (N, 32, 32, 3) uint8 HWC images and integer labels."""
    batch = _unpickle_cifar(path, (b"data", b"labels"))
    data = np.asarray(batch[b"data"])
    labels = [int(v) for v in batch[b"labels"]]
    side = _CIFAR_SIDE
    problem = None
    if data.size == 0 or not labels:
        problem = "it holds no images (an empty batch: the download or extraction was cut short)"
    elif data.ndim != 2 or data.shape[1] != 3 * side * side:
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


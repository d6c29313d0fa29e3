"""Decoded images parked between the image ExampleGen's two passes, so each file is decoded once.

The ExampleGen needs a whole-data fact (the brightness tertiles of all image means) before
it can write any example, so it goes over the data twice. Decoding the files again in the
second pass doubled the cost of ingestion; holding the decoded pixels in a Beam PCollection
between the passes would keep them all in the runner's memory. Instead, the first pass
writes each chunk of decoded images to a block file in the output directory (raw uint8
pixels, labels and ids in one ``.npz``: one sequential read, no decode, and readable
through ``tf.io.gfile`` by every worker of a distributed runner); the second pass reads
the blocks back. The blocks take the decoded size of the data on disk (H x W x C bytes
per image) until the ExampleGen removes its scratch folder.
"""
from __future__ import annotations

import dataclasses
import io

import numpy as np
import tensorflow as tf


@dataclasses.dataclass
class Block:
    """Decoded images of one chunk, in their final shape."""

    pixels: np.ndarray  # (N, H, W, C) uint8
    labels: list[str]
    ids: list[str]

    def means(self) -> np.ndarray:
        """Per-image mean pixel value, computed as the prepare step does (``writer._mean_intensities``)."""
        return self.pixels.reshape(len(self.pixels), -1).mean(axis=1) if len(self.pixels) else np.empty(0)


def write_block(path: str, block: Block) -> None:
    """One write of the whole block (a retried task overwrites it with the same bytes)."""
    buffer = io.BytesIO()
    np.savez(buffer, pixels=block.pixels, labels=np.asarray(block.labels, dtype=str),
             ids=np.asarray(block.ids, dtype=str))
    with tf.io.gfile.GFile(path, "wb") as out:
        out.write(buffer.getvalue())


def read_block(path: str) -> Block:
    with tf.io.gfile.GFile(path, "rb") as handle:
        data = handle.read()
    with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
        return Block(arrays["pixels"], arrays["labels"].tolist(), arrays["ids"].tolist())

"""Held-out TRAIN windows for the seq2seq Trainer: when to stop, and how much to trust the network.

The eval split decides blessing, so nothing may be tuned on it. The Trainer holds out blocks of consecutive
train windows instead, every ``cycle`` windows one block of ``fraction * cycle``. Consecutive in the text, not
in the file: Transform writes a large corpus's windows out of order (on a 1.08M-word folder, each window's
file neighbour was 9 windows away in the text, and every window of a file-order block had a fit window within
4 windows of the text), so the blocks are cut in the order ``kneser_ney.text_order`` recovers. Windows overlap
their neighbours (a window's next word is in the previous window's target), so ``GAP`` windows on each side of
a block are used for neither: a random choice of windows would let the network see every held-out next word in
training and look better than it is. Small corpora hold out a larger share, so that the fit of the mix
(models/seq2seq/blend.py) rests on a few hundred windows at least.
"""
from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from data.tfrecords import list_files

FIT, HOLDOUT, GAP_LABEL = 0, 1, -1
GAP = 4                  # windows dropped on each side of a held-out block
SMALL_CORPUS = 5000      # train windows below which ``SMALL_FRACTION`` is held out
SMALL_FRACTION, FRACTION = 0.2, 0.1
MAX_HOLDOUT = 20_000     # held-out windows at most (plenty to compare a few models)
_BATCH = 4096


def labels(count: int) -> np.ndarray:
    """FIT / HOLDOUT / GAP_LABEL for train windows ``0..count-1`` in the order of the text."""
    fraction = SMALL_FRACTION if count < SMALL_CORPUS else min(FRACTION, MAX_HOLDOUT / max(1, count))
    cycle = int(np.clip(count // 8, 60, 1000))
    block = max(1, int(round(fraction * cycle)))
    r = np.arange(count) % cycle
    start = cycle - block - GAP  # the block sits near the end of each cycle, after a gap
    out = np.full(count, FIT, np.int8)
    out[(r >= start - GAP) & (r < start)] = GAP_LABEL
    out[(r >= start) & (r < start + block)] = HOLDOUT
    out[r >= start + block] = GAP_LABEL
    if count < cycle:  # too short for one cycle: nothing held out
        out[:] = FIT
    return out


def split_files(patterns: str | Sequence[str], out_dir: str,
                text_order: np.ndarray | None = None) -> tuple[str, str, dict[str, int]]:
    """Write the train records as ``fit.gz`` and ``holdout.gz`` under ``out_dir``; with counts.

    ``text_order``: the records (in the order of their sorted files) in the order of the text
    (``kneser_ney.text_order``); without it the file's order is taken for the text's.
    """
    files = [f for p in ([patterns] if isinstance(patterns, str) else patterns) for f in list_files(p)]
    records = tf.data.TFRecordDataset(files, compression_type="GZIP")
    # Read in batches: tf.data hands over one record per Python step at ~100 µs each (``reduce``,
    # ``as_numpy_iterator``), minutes of the Trainer's start on millions of windows
    # (docs/history/benchmarks-log.md, "The whole pipeline on 10M words"); a batch of records costs about the same.
    if text_order is None:
        count = sum(len(batch) for batch in records.batch(_BATCH).as_numpy_iterator())
        label = labels(count)
    else:
        count = len(text_order)
        label = np.empty(count, np.int8)
        label[text_order] = labels(count)
    tf.io.gfile.makedirs(out_dir)
    paths = {FIT: os.path.join(out_dir, "fit.gz"), HOLDOUT: os.path.join(out_dir, "holdout.gz")}
    writers = {key: tf.io.TFRecordWriter(path, options="GZIP") for key, path in paths.items()}
    try:
        start = 0
        for batch in records.batch(_BATCH).as_numpy_iterator():
            for record, key in zip(batch, label[start:start + len(batch)].tolist()):
                writer = writers.get(key)
                if writer is not None:
                    writer.write(record)
            start += len(batch)
    finally:
        for writer in writers.values():
            writer.close()
    if start != count:
        raise RuntimeError(f"{start} train records read, {count} windows ordered: the train files changed while "
                           "the Trainer read them")
    counts = {"fit": int((label == FIT).sum()), "holdout": int((label == HOLDOUT).sum()),
              "gap": int((label == GAP_LABEL).sum())}
    return paths[FIT], paths[HOLDOUT], counts

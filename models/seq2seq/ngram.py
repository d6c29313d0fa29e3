"""The corpus's own n-gram counts as a model served next to the network (one SavedModel).

Why: on a few thousand words the network cannot learn what a count table knows after one
pass (which word follows "the"), and on millions it learns more than the table. Language
modelling's standard answer is to combine them; the mix is fitted on held-out TRAIN
windows (models/seq2seq/blend.py), so the served model is at least the count table
wherever the network adds nothing.

The counts are taken where the gate measures: at a window's boundary, the next token after
the last two context tokens ``(u, v) -> w`` (one event per window, as
``baselines.ngram_baselines`` counts), so neighbouring windows share no event. Two
distributions come out of them, both proper (they sum to 1 over the vocabulary):

- ``interpolated``: absolute discounting interpolated over three orders (Ney, Essen and
  Kneser 1994), ``p3(w|u,v) = max(c(uvw)-D3, 0)/c(uv.) + g(uv) p2(w|v)``, the same one order
  down, and a unigram floor with a little uniform mass; discounts ``D = n1 / (n1 + 2 n2)``
  from the count-of-counts.
- ``bigram``: exactly the bigram reference's ranking (baselines.py) as a distribution: the
  followers of ``v`` by count, ties to the smaller id, then every other token in the
  reference's unigram order (count, then id), with a share ``eps(v)`` small enough that no
  other token passes a follower; the unigram order alone for a ``v`` never seen. So a mix
  that gives it all the weight scores what the reference scores, to the window.
- ``cache``: the window's own context tokens by how often they occur in it (Kuhn and De Mori
  1990's cache model), smoothed by one pseudo-token of the unigram distribution. A document repeats its
  own words: on a 3,000-word license, a quarter of the next words are already in the 32
  tokens before them, which no count table of a small corpus knows (benchmarks' "Text
  corpora" table).

:class:`NgramTables` holds the tables as non-trainable variables (CSR rows; trigram rows
found by binary search over sorted ``u * V + v`` keys) and computes both for a batch in
TF ops, so training (the fit of the mix) and serving share one implementation.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from models.seq2seq import features
from models.seq2seq.kneser_ney import _last, _scatter_rows  # the same CSR lookups the counts use

#: Share of the unigram floor spread uniformly (no token gets probability 0).
UNIFORM_SHARE = 1e-3


def boundary_events(context_ids: np.ndarray, next_ids: np.ndarray) -> np.ndarray:
    """``[n, 3]`` int64 ``(u, v, w)``: the last two non-pad context ids (PAD when absent), next id.

    ``context_ids`` is right-padded ``[n, Lc]`` (models/seq2seq/preprocessing.py).
    """
    context_ids = np.asarray(context_ids, np.int64)
    lengths = (context_ids != features.PAD_ID).sum(axis=1)
    rows = np.arange(len(context_ids))
    v = np.where(lengths >= 1, context_ids[rows, np.maximum(lengths - 1, 0)], features.PAD_ID)
    u = np.where(lengths >= 2, context_ids[rows, np.maximum(lengths - 2, 0)], features.PAD_ID)
    return np.stack([u, v, np.asarray(next_ids, np.int64).reshape(-1)], axis=1)


def read_events(patterns: str | Sequence[str], context_tokens: int) -> np.ndarray:
    """Boundary events of every transformed example in ``patterns`` (GZIP TFRecords)."""
    files = sorted(f for p in ([patterns] if isinstance(patterns, str) else patterns) for f in tf.io.gfile.glob(p))
    spec = {features.CONTEXT_XF: tf.io.FixedLenFeature([context_tokens], tf.int64),
            features.NEXT_TOKEN_XF: tf.io.FixedLenFeature([], tf.int64)}
    chunks = []
    for batch in tf.data.TFRecordDataset(files, compression_type="GZIP").batch(4096):
        parsed = tf.io.parse_example(batch, spec)
        chunks.append(boundary_events(parsed[features.CONTEXT_XF].numpy(), parsed[features.NEXT_TOKEN_XF].numpy()))
    return np.concatenate(chunks) if chunks else np.zeros([0, 3], np.int64)


def novel_word_share(unigram_counts: np.ndarray) -> float:
    """Good-Turing's estimate of the chance that the next word is one never seen in training (Good 1953):
    the share of events whose word was seen once. Such a word is out of the vocabulary when the model is
    used (the vocabulary is the train text's), so its share goes to the OOV id."""
    total = unigram_counts.sum()
    return float((unigram_counts[:-features.NUM_OOV_BUCKETS] == 1).sum() / total) if total else 0.0


def unseen_as_oov(ids: np.ndarray, seen: np.ndarray) -> np.ndarray:
    """``ids`` with every id not in ``seen`` (a boolean mask over the vocabulary) replaced by the OOV id, PAD kept:
    how text new to a count table reaches it when the model is used (cross-fitting, models/seq2seq/trainer.py)."""
    oov = len(seen) - features.NUM_OOV_BUCKETS
    return np.where(seen[ids] | (ids == features.PAD_ID), ids, oov)


def _discount(counts: np.ndarray) -> float:
    n1, n2 = int((counts == 1).sum()), int((counts == 2).sum())
    return float(np.clip(n1 / (n1 + 2 * n2), 0.1, 0.9)) if n1 + n2 else 0.5


def _csr(keys: np.ndarray, cols: np.ndarray, vals: np.ndarray, num_rows: int):
    """Row splits over ``num_rows`` rows for (row key, column, value) triples sorted by key."""
    splits = np.zeros(num_rows + 1, np.int64)
    np.add.at(splits, keys + 1, 1)
    return np.cumsum(splits), cols.astype(np.int32), vals.astype(np.float32)


def fit_tables(events: np.ndarray, vocab_size: int) -> dict[str, np.ndarray]:
    """Count ``events`` (``boundary_events``) into the arrays :class:`NgramTables` serves."""
    V = vocab_size
    u, v, w = (events[:, i].astype(np.int64) for i in range(3))
    unigram_counts = np.bincount(w, minlength=V).astype(np.float64)
    total = max(1.0, unigram_counts.sum())
    p1 = (1 - UNIFORM_SHARE) * unigram_counts / total + UNIFORM_SHARE / V
    if not len(events):
        p1 = np.full(V, 1.0 / V)
    novel = novel_word_share(unigram_counts)
    p1 = (1 - novel) * p1
    p1[V - features.NUM_OOV_BUCKETS:] += novel / features.NUM_OOV_BUCKETS

    # Bigrams (v, w): discounted mass per row and the row's back-off weight.
    pairs, pair_counts = np.unique(v * V + w, return_counts=True)
    pv, pw = pairs // V, pairs % V
    context_counts = np.bincount(pv, weights=pair_counts, minlength=V)
    context_types = np.bincount(pv, minlength=V)
    d2 = _discount(pair_counts)
    seen = context_counts > 0
    safe = np.where(seen, context_counts, 1.0)
    gamma2 = np.where(seen, d2 * context_types / safe, 1.0)
    b_splits, b_cols, b_vals = _csr(pv, pw, np.maximum(pair_counts - d2, 0) / safe[pv], V)
    # The reference's order as scores: count + a fraction falling with the id (ties to the smaller id).
    tie = 0.5 * (1 - np.arange(V) / (V + 1))
    order = unigram_counts + tie
    reference_unigram = order / order.sum()
    follower = pair_counts + tie[pw]
    row_total = np.bincount(pv, weights=follower, minlength=V)
    # Every token gets fill(v) * q(w); a follower's value is set so that its total is its own share
    # (the fill must not reorder followers of equal count), and the row still sums to 1.
    fill = np.where(seen, 1 / (2 * (row_total + 1)), 1.0)  # below any follower's share
    followers_q = np.bincount(pv, weights=reference_unigram[pw], minlength=V)
    own = 1 - fill * (1 - followers_q)                     # the followers' total
    m_vals = (own[pv] * follower / np.where(seen, row_total, 1.0)[pv]
              - fill[pv] * reference_unigram[pw]).astype(np.float32)

    # Trigrams (u, v, w) keyed by u * V + v.
    triples, triple_counts = np.unique((u * V + v) * V + w, return_counts=True)
    keys_of_triples, tw = triples // V, triples % V
    keys, key_index = np.unique(keys_of_triples, return_inverse=True)
    key_counts = np.bincount(key_index, weights=triple_counts)
    key_types = np.bincount(key_index)
    d3 = _discount(triple_counts)
    t_splits, t_cols, t_vals = _csr(key_index, tw, np.maximum(triple_counts - d3, 0) / key_counts[key_index],
                                    len(keys))
    return {
        "unigram": p1.astype(np.float32),
        "bigram_splits": b_splits, "bigram_cols": b_cols, "bigram_vals": b_vals,
        "bigram_gamma": gamma2.astype(np.float32), "bigram_mle": m_vals,
        "bigram_fill": fill.astype(np.float32), "reference_unigram": reference_unigram.astype(np.float32),
        "trigram_keys": keys.astype(np.int64), "trigram_splits": t_splits, "trigram_cols": t_cols,
        "trigram_vals": t_vals, "trigram_gamma": (d3 * key_types / key_counts).astype(np.float32),
    }


class NgramTables(tf.Module):
    """The fitted count tables as variables; :meth:`probabilities` for a batch of contexts."""

    def __init__(self, tables: dict[str, np.ndarray], name: str = "ngram"):
        super().__init__(name=name)
        self.vocab_size = int(len(tables["unigram"]))
        with self.name_scope:
            self.tables = {key: tf.Variable(np.asarray(value), trainable=False, name=key)
                           for key, value in tables.items()}

    def probabilities(self, context_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        """Right-padded ``[batch, Lc]`` ids -> ``{"interpolated", "bigram", "cache"}`` ``[batch, V]``."""
        t = self.tables
        context_ids = tf.cast(context_ids, tf.int64)
        lengths = tf.reduce_sum(tf.cast(tf.not_equal(context_ids, features.PAD_ID), tf.int64), axis=1)
        v = _last(context_ids, lengths, 1)
        u = _last(context_ids, lengths, 2)
        batch = tf.shape(context_ids, out_type=tf.int64)[0]
        shape = tf.stack([batch, tf.constant(self.vocab_size, tf.int64)])
        p1 = tf.broadcast_to(t["unigram"][None, :], tf.cast(shape, tf.int32))

        b_start, b_end = tf.gather(t["bigram_splits"], v), tf.gather(t["bigram_splits"], v + 1)
        p2 = (_scatter_rows(b_start, b_end, t["bigram_cols"], t["bigram_vals"], shape)
              + tf.gather(t["bigram_gamma"], v)[:, None] * p1)
        mle = (_scatter_rows(b_start, b_end, t["bigram_cols"], t["bigram_mle"], shape)
               + tf.gather(t["bigram_fill"], v)[:, None] * t["reference_unigram"][None, :])

        keys = t["trigram_keys"]
        query = u * self.vocab_size + v
        count = tf.size(keys, out_type=tf.int64)
        position = tf.minimum(tf.searchsorted(keys, query, out_type=tf.int64), tf.maximum(count - 1, 0))
        found = tf.logical_and(count > 0, tf.equal(tf.gather(keys, position), query))
        row = tf.where(found, position, 0)
        t_start = tf.where(found, tf.gather(t["trigram_splits"], row), 0)
        t_end = tf.where(found, tf.gather(t["trigram_splits"], row + 1), 0)
        gamma3 = tf.where(found, tf.gather(t["trigram_gamma"], row), 1.0)
        p3 = _scatter_rows(t_start, t_end, t["trigram_cols"], t["trigram_vals"], shape) + gamma3[:, None] * p2
        return {"interpolated": p3, "bigram": mle, "cache": _cache(context_ids, shape, p1)}


class ServedCounts(tf.Module):
    """The count components the served model mixes (models/seq2seq/blend.py), ``[batch, V]`` each:

    - ``kneser_ney``: the Kneser-Ney model of the train text (models/seq2seq/kneser_ney.py): ``tables``
      (every position, or word starts alone), with the model of word starts ``word_starts`` mixed in by
      ``word_start_share`` when given (models/seq2seq/count_reference.py); the same model as the gate's
      reference, so all the weight on it ranks exactly as the reference;
    - ``cache``: the window's own context tokens (``_cache``), smoothed by Kneser-Ney's unigram level;
    - ``unknown``: all the mass on the OOV id, the chance that the next word is one the train text never
      held (the mix's share of it is fitted with words new to the tables read as OOV).
    """

    def __init__(self, tables: dict[str, np.ndarray], word_starts: dict[str, np.ndarray] | None = None,
                 word_start_share: float = 0.0, name: str = "counts"):
        from models.seq2seq import kneser_ney

        super().__init__(name=name)
        with self.name_scope:
            self.kneser_ney = kneser_ney.KneserNey(tables)
            self.word_starts = (kneser_ney.KneserNey(word_starts, name="kneser_ney_word_starts")
                                if word_starts is not None and word_start_share > 0 else None)
        self.word_start_share = float(word_start_share) if self.word_starts is not None else 0.0
        self.vocab_size = self.kneser_ney.vocab_size

    def probabilities(self, context_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        context_ids = tf.cast(context_ids, tf.int64)
        batch = tf.shape(context_ids, out_type=tf.int64)[0]
        oov = tf.one_hot(tf.fill(tf.reshape(batch, [1]), tf.constant(self.vocab_size - features.NUM_OOV_BUCKETS,
                                                                     tf.int64)), self.vocab_size)
        counts = self.kneser_ney.probabilities(context_ids)
        if self.word_starts is not None:
            share = self.word_start_share
            counts = (1.0 - share) * counts + share * self.word_starts.probabilities(context_ids)
        return {"kneser_ney": counts, "cache": cache(context_ids, self.kneser_ney.tables["unigram"]), "unknown": oov}


def cache(context_ids: tf.Tensor, unigram: tf.Tensor) -> tf.Tensor:
    """:class:`ServedCounts`' ``cache`` part of ``[batch, Lc]`` contexts, smoothed by Kneser-Ney's unigram
    level ``[V]``."""
    context_ids = tf.cast(context_ids, tf.int64)
    shape = tf.stack([tf.shape(context_ids, out_type=tf.int64)[0], tf.size(unigram, out_type=tf.int64)])
    return _cache(context_ids, shape, tf.broadcast_to(unigram[None, :], tf.cast(shape, tf.int32)))


def _cache(context_ids: tf.Tensor, shape: tf.Tensor, unigram: tf.Tensor) -> tf.Tensor:
    """Each row's real context tokens by their share of the row, with one pseudo-token spread as ``unigram``
    (so no token gets probability 0, and an empty context gives the unigram distribution)."""
    real = tf.not_equal(context_ids, features.PAD_ID)
    rows = tf.broadcast_to(tf.range(tf.shape(context_ids, out_type=tf.int64)[0])[:, None], tf.shape(context_ids))
    indices = tf.stack([tf.boolean_mask(rows, real), tf.boolean_mask(context_ids, real)], axis=1)
    counts = tf.scatter_nd(indices, tf.ones(tf.shape(indices)[:1], tf.float32), shape)
    return (counts + unigram) / (tf.reduce_sum(counts, axis=1, keepdims=True) + 1.0)



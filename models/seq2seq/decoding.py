"""Choosing the next token while generating: the rules that keep a continuation readable.

Pure TF functions over ``[batch, V]`` log-probabilities, used inside the exported ``generate``
loop (models/seq2seq/export.py), so TF Serving applies them with no Python:

- ``repetition_penalty`` (Keskar et al. 2019, CTRL): the log-probability of every token already
  in the text (prompt window and generated) is multiplied by the penalty (> 1 lowers it);
- ``no_repeat_ngram`` (n): a token that would complete an n-gram already in the text is banned,
  so greedy decoding cannot fall into a loop of one phrase (n <= 0: off);
- top-k, then top-p (nucleus, Holtzman et al. 2020: the smallest set of tokens whose
  probability reaches ``top_p``), then a draw at ``temperature``; the draw is stateless, from
  ``(seed, step)``, so the same request gives the same text.
"""
import tensorflow as tf

from models.seq2seq import features

BANNED = -1e9  # log-probability of a token that must not be generated


def left_aligned(window: tf.Tensor, length: tf.Tensor) -> tf.Tensor:
    """Right-padded ``[batch, W]`` rows -> the same tokens ending at the last column (pads first)."""
    width = tf.shape(window)[1]
    index = (tf.range(width)[None, :] + length[:, None]) % width
    return tf.gather(window, index, batch_dims=1)


def presence(history: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """``[batch, V]`` bool: the token occurs in the row of ``history`` (PAD ignored)."""
    rows = tf.cast(tf.where(tf.not_equal(history, features.PAD_ID)), tf.int64)
    ids = tf.gather_nd(history, rows)
    hits = tf.scatter_nd(tf.stack([rows[:, 0], ids], axis=1), tf.ones_like(ids, tf.int32),
                         tf.cast(tf.stack([tf.shape(history)[0], vocab_size]), tf.int64))
    return hits > 0


def penalise_repeats(log_probs: tf.Tensor, seen: tf.Tensor, penalty: tf.Tensor) -> tf.Tensor:
    """Log-probabilities (<= 0) of ``seen`` tokens times ``penalty`` (no change for penalty <= 1)."""
    factor = tf.maximum(penalty, 1.0)
    return tf.where(seen, log_probs * factor, log_probs)


def repeated_ngram_ban(history: tf.Tensor, n: tf.Tensor, vocab_size: int) -> tf.Tensor:
    """``[batch, V]`` bool: tokens that would repeat an n-gram of ``history`` [batch, T] (PAD never matches)."""
    length = tf.shape(history)[1]

    def banned():
        frames = tf.signal.frame(history, n, 1, axis=1)                      # [batch, T-n+1, n]
        prefix = history[:, length - n + 1:]                                 # the last n-1 tokens
        same = tf.reduce_all(tf.equal(frames[:, :, :-1], prefix[:, None, :]), axis=2)
        real = tf.reduce_all(tf.not_equal(frames, features.PAD_ID), axis=2)
        match = tf.where(tf.logical_and(same, real))                         # [m, 2] (row, frame)
        tokens = tf.gather_nd(frames[:, :, -1], match)
        hits = tf.scatter_nd(tf.stack([match[:, 0], tokens], axis=1), tf.ones_like(tokens, tf.int32),
                             tf.cast(tf.stack([tf.shape(history)[0], vocab_size]), tf.int64))
        return hits > 0

    off = tf.zeros(tf.stack([tf.shape(history)[0], vocab_size]), tf.bool)
    return tf.cond(tf.logical_and(n >= 1, length >= n), banned, lambda: off)


def choose(log_probs: tf.Tensor, top_k: tf.Tensor, top_p: tf.Tensor, temperature: tf.Tensor,
           seed: tf.Tensor, step: tf.Tensor) -> tf.Tensor:
    """One id per row: argmax when ``top_k <= 1`` or ``temperature <= 0``, else a seeded draw."""
    vocab_size = tf.shape(log_probs)[1]

    def sample():
        k = tf.clip_by_value(top_k, 1, vocab_size)
        top = tf.math.top_k(log_probs / temperature, k=k)                    # sorted, descending
        probs = tf.nn.softmax(top.values)
        before = tf.math.cumsum(probs, axis=1, exclusive=True)
        keep = tf.logical_or(before < top_p, tf.range(k)[None, :] == 0)      # the nucleus, >= 1 token
        values = tf.where(keep, top.values, BANNED)
        choice = tf.random.stateless_categorical(values, 1, seed=tf.stack([seed, tf.cast(step, tf.int64)]),
                                                 dtype=tf.int32)
        return tf.cast(tf.gather(top.indices, choice, batch_dims=1)[:, 0], tf.int64)

    greedy = tf.logical_or(top_k <= 1, temperature <= 0.0)
    return tf.cond(greedy, lambda: tf.argmax(log_probs, axis=-1), sample)

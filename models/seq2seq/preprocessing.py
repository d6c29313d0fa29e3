"""TFT preprocessing for text windows: the same graph runs in Transform, training and serving.

Tokens: the text is lower-cased, then every punctuation or symbol character becomes a
token of its own, except that a run of one decoration character (``***``, ``===``,
``---``, ``__``, ``...``, ``::``, ...) stays one token (reST underlines and dunder names
would otherwise flood the sequences with predictable filler). Words are what remains
between whitespace. ``"__init__()"`` -> ``" __ init __ ( ) "``.

Sequences (ids from the vocabulary, see ``features``):

- context: the LAST ``context_tokens`` tokens of the context (the ones nearest to what
  comes next), right-padded with 0. Right padding keeps the real tokens first, which is
  what Keras' cuDNN LSTM kernel requires to run with a mask on GPU.
- target: the first ``target_tokens`` of ``[t1, ..., tn, END]``, right-padded with 0.
  END marks where the window's continuation stops, so generation learns to stop.
- decoder input: the target shifted right behind START (teacher forcing).
- next_token: t1, the label TFMA scores the next-token distribution against.
- context/target word starts: 1 where a token begins a whitespace word (``word_starts``), for the
  Trainer's count models, which count the events the eval windows ask for.

At serving only ``context`` is fed; TFT prunes the target-derived outputs.
"""
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft

from models.seq2seq import features

# RE2 has no back-references, so "a run of the same character" is spelled out per character.
_TOKEN_RE = r"(\*+|=+|-+|_+|~+|\^+|#+|\.+|:+|[\p{P}\p{S}])"


def tokenize(text: tf.Tensor) -> tf.RaggedTensor:
    """[batch] strings -> [batch, (tokens)] lower-cased word and punctuation tokens."""
    text = tf.reshape(text, [-1])
    text = tf.strings.lower(text, encoding="utf-8")
    return tf.strings.split(tf.strings.regex_replace(text, _TOKEN_RE, r" \1 "))


def word_starts(text: tf.Tensor) -> tf.RaggedTensor:
    """[batch] strings -> [batch, (tokens)] int64: 1 for the first token of each whitespace word, aligned with
    ``tokenize`` (the same tokens: whitespace is split first, then each word as ``tokenize`` splits it)."""
    text = tf.strings.lower(tf.reshape(text, [-1]), encoding="utf-8")
    words = tf.strings.split(text)                                                  # [batch, (words)]
    pieces = tf.strings.split(tf.strings.regex_replace(words.flat_values, _TOKEN_RE, r" \1 "))  # [words, (tokens)]
    first = tf.cast(tf.equal(tf.ragged.range(pieces.row_lengths()), 0), tf.int64)
    return words.with_flat_values(first).merge_dims(1, 2)


def preprocessing_fn(inputs: dict[str, tf.Tensor], custom_config: dict[str, Any] | None = None):
    """Token id sequences for the encoder/decoder and the next-token label.

    ``custom_config``: ``vocab_size`` (tokens kept by frequency, besides the reserved ones),
    ``context_tokens`` and ``target_tokens`` (fixed sequence lengths); see
    ``features.TRANSFORM_DEFAULTS``.
    """
    settings = features.transform_settings(custom_config)
    context_len, target_len = settings[features.CONTEXT_TOKENS], settings[features.TARGET_TOKENS]
    context = tokenize(inputs[features.CONTEXT])
    target = tokenize(inputs[features.TARGET])
    # One vocabulary for both sides: the decoder emits the tokens the encoder reads.
    vocabulary = tft.vocabulary(
        tf.concat([context.flat_values, target.flat_values], axis=0),
        top_k=settings[features.VOCAB_SIZE],
        reserved_tokens=list(features.RESERVED_TOKENS),
        vocab_filename=features.VOCABULARY,
    )
    context_ids = _lookup(context, vocabulary)
    target_ids = _lookup(target, vocabulary)

    batch = tf.shape(target_ids.row_lengths())[0]
    end = tf.fill([batch, 1], tf.constant(features.END_ID, tf.int64))
    start = tf.fill([batch, 1], tf.constant(features.START_ID, tf.int64))
    target_seq = tf.concat([target_ids, end], axis=1)
    decoder_seq = tf.concat([start, target_ids], axis=1)
    padded_target = _pad(target_seq[:, :target_len], target_len)
    not_a_word = tf.zeros([batch, 1], tf.int64)  # END begins no word
    target_starts = tf.concat([word_starts(inputs[features.TARGET]), not_a_word], axis=1)
    return {
        features.CONTEXT_XF: _pad(context_ids[:, -context_len:], context_len),
        features.DECODER_INPUT_XF: _pad(decoder_seq[:, :target_len], target_len),
        features.TARGET_XF: padded_target,
        features.NEXT_TOKEN_XF: padded_target[:, 0],
        features.CONTEXT_STARTS_XF: _pad(word_starts(inputs[features.CONTEXT])[:, -context_len:], context_len),
        features.TARGET_STARTS_XF: _pad(target_starts[:, :target_len], target_len),
    }


def _lookup(tokens: tf.RaggedTensor, vocabulary) -> tf.RaggedTensor:
    ids = tft.apply_vocabulary(tokens.flat_values, vocabulary,
                               num_oov_buckets=features.NUM_OOV_BUCKETS)
    return tokens.with_flat_values(ids)


def _pad(ids: tf.RaggedTensor, length: int) -> tf.Tensor:
    return ids.to_tensor(default_value=features.PAD_ID, shape=[None, length])

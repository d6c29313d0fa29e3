"""Export the seq2seq model as a TF Serving SavedModel with its signatures.

- ``serving_default``: serialized tf.Examples (only ``context`` is required) ->
  ``probabilities`` [batch, vocab] (the next-token distribution: the decoder's first step
  after START), ``top_k_tokens`` / ``top_k_probabilities`` [batch, 5]. TFMA scores it.
- ``transform_features``: serialized tf.Examples -> transformed features (TFMA's label
  ``next_token_xf``).
- ``generate``: ``prompts`` string [batch], ``max_new_tokens`` int32 scalar (capped at
  ``MAX_NEW_TOKENS``), ``top_k`` int32 scalar (<= 1: greedy), ``temperature`` float32
  scalar (<= 0: greedy), ``stop_at`` string scalar (space-separated tokens, e.g. ``". ? !"``
  to stop after a sentence; ``""``: never stop early) -> ``continuations`` string [batch]
  (the generated tokens joined by spaces) and ``token_counts`` int32 [batch]. Each new token
  is appended to the context and the model reads the last ``context_tokens`` of it again
  (a sliding window), so generation goes on for ``max_new_tokens`` tokens unless a row
  emits a ``stop_at`` token (it is included). Pad, start, end and OOV tokens are never
  emitted. The loop is a graph while-loop, so TF Serving runs it with no Python. Sampling
  draws from the ``top_k`` most likely tokens after dividing the logits by ``temperature``.

TF Serving REST: scalars need the columnar ("inputs") request form, e.g.
``POST /v1/models/seq2seq:predict`` with
``{"signature_name": "generate", "inputs": {"prompts": ["the for statement is used"],
"max_new_tokens": 12, "top_k": 5, "temperature": 0.8, "stop_at": ". ? !"}}`` ->
``{"outputs": {"continuations": ["to iterate over ..."], "token_counts": [12]}}``.
Next-token probabilities from raw text: ``{"inputs": {"examples": [{"b64": "<base64 of a serialized tf.Example>"}]}}``.

TF Serving warm-up requests for ``serving_default`` and ``generate`` go into
``assets.extra`` (models/common/warmup.py).

The transform graph is embedded (``model.tft_layer``): ``generate`` tokenizes prompts
with it, so serving and training tokenization cannot drift apart.
"""
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from models.common import signatures, warmup
from models.seq2seq import features
from models.seq2seq.model import Seq2Seq

GENERATE_SIGNATURE = "generate"
MAX_NEW_TOKENS = 256    # upper bound of the decode loop, whatever the request asks
TOP_K_OUTPUTS = 5
UNKNOWN_TOKEN = "<unk>"  # printable name of the OOV id
_BANNED = -1e9           # logit bias that keeps a token from being generated
_WARMUP_PROMPT = b"the"


def vocabulary_tokens(tf_transform_output: tft.TFTransformOutput) -> list[str]:
    """Token string of every model output id: the vocabulary file, then the OOV token."""
    tokens = [t.decode("utf-8", "replace")
              for t in tf_transform_output.vocabulary_by_name(features.VOCABULARY)]
    return tokens + [UNKNOWN_TOKEN] * features.NUM_OOV_BUCKETS


def export_serving_model(model: Seq2Seq, tf_transform_output: tft.TFTransformOutput,
                         export_dir: str) -> None:
    tokens = vocabulary_tokens(tf_transform_output)
    if len(tokens) != model.vocab_size:
        raise ValueError(f"Model has {model.vocab_size} outputs, vocabulary {len(tokens)} tokens")
    model.tft_layer = tf_transform_output.transform_features_layer()
    names = tf.constant(tokens)
    raw_spec = signatures.raw_serving_spec(tf_transform_output, drop=features.LABEL_KEYS)
    raw_spec = {features.CONTEXT: raw_spec[features.CONTEXT]}

    def next_token_outputs(transformed: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        probabilities = tf.nn.softmax(model.next_token_logits(transformed[features.CONTEXT_XF]))
        top = tf.math.top_k(probabilities, k=TOP_K_OUTPUTS)
        return {
            "probabilities": probabilities,
            "top_k_tokens": tf.gather(names, top.indices),
            "top_k_probabilities": top.values,
        }

    tf.saved_model.save(model, export_dir, signatures={
        "serving_default": signatures.examples_signature(model, raw_spec, next_token_outputs),
        "transform_features": signatures.transform_features_signature(model, tf_transform_output),
        GENERATE_SIGNATURE: _generate_function(model, names, raw_spec[features.CONTEXT].shape),
    })
    warmup.write_warmup_requests(export_dir, [
        ("serving_default", {"examples": np.array(
            [warmup.zero_example(raw_spec, {features.CONTEXT: _WARMUP_PROMPT})], dtype=object)}),
        (GENERATE_SIGNATURE, {"prompts": np.array([_WARMUP_PROMPT], dtype=object), "max_new_tokens": np.int32(2),
                              "top_k": np.int32(1), "temperature": np.float32(1.0),
                              "stop_at": np.array(b"", dtype=object)}),
    ])


def _generate_function(model: Seq2Seq, names: tf.Tensor, context_shape: Sequence[int]):
    vocab_size = model.vocab_size
    # END is never emitted: the model learned it at the end of a training window, which is
    # an arbitrary cut, not the end of the text. Only the caller's ``stop_at`` stops early.
    banned = [features.PAD_ID, features.START_ID, features.END_ID] + list(
        range(vocab_size - features.NUM_OOV_BUCKETS, vocab_size))
    bias = tf.constant([_BANNED if i in banned else 0.0 for i in range(vocab_size)], tf.float32)

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="prompts"),
        tf.TensorSpec([], tf.int32, name="max_new_tokens"),
        tf.TensorSpec([], tf.int32, name="top_k"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.string, name="stop_at"),
    ])
    def generate(prompts, max_new_tokens, top_k, temperature, stop_at):
        # The raw feature may be [batch] or [batch, 1] (SchemaGen's infer_feature_shape).
        raw = tf.reshape(prompts, [-1, *context_shape])
        window = model.tft_layer({features.CONTEXT: raw})[features.CONTEXT_XF]
        length = tf.reduce_sum(tf.cast(tf.not_equal(window, features.PAD_ID), tf.int32), axis=1)
        stops = tf.strings.split(tf.strings.lower(stop_at, encoding="utf-8"))
        batch = tf.shape(prompts)[0]
        steps = tf.clip_by_value(max_new_tokens, 0, MAX_NEW_TOKENS)
        greedy = tf.logical_or(top_k <= 1, temperature <= 0.0)
        k = tf.clip_by_value(top_k, 1, vocab_size)
        done = tf.zeros([batch], tf.bool)
        generated = tf.zeros([batch, 0], tf.int64)
        for _ in tf.range(steps):
            tf.autograph.experimental.set_loop_options(
                shape_invariants=[(generated, tf.TensorShape([None, None]))])
            if tf.reduce_all(done):
                break
            # The sliding window: the model reads the last context tokens, generated ones included,
            # and predicts the first token after them (what it is trained and evaluated on).
            logits = model.next_token_logits(window) + bias
            # tf.cond calls the branches at once, inside this iteration: no late binding.
            token = tf.cond(greedy, lambda: tf.argmax(logits, axis=-1),  # noqa: B023
                            lambda: _sample(logits, k, temperature))  # noqa: B023
            token = tf.where(done, tf.constant(features.PAD_ID, tf.int64), token)
            window, length = _append(window, length, token)
            hit = tf.reduce_any(tf.equal(tf.gather(names, token)[:, None], stops[None, :]), axis=1)
            done = tf.logical_or(done, hit)
            generated = tf.concat([generated, token[:, None]], axis=1)
        keep = tf.not_equal(generated, features.PAD_ID)
        words = tf.ragged.boolean_mask(tf.gather(names, generated), keep)
        return {"continuations": tf.strings.reduce_join(words, axis=1, separator=" "),
                "token_counts": tf.cast(words.row_lengths(), tf.int32)}

    return generate


def _append(window: tf.Tensor, length: tf.Tensor, token: tf.Tensor):
    """Add ``token`` after the last real id of each right-padded row; a full row slides left.

    A PAD token (a finished row) leaves the row as it is.
    """
    width = tf.shape(window)[1]
    full = length >= width
    shifted = tf.concat([window[:, 1:], token[:, None]], axis=1)
    inserted = tf.where(tf.range(width)[None, :] == length[:, None], token[:, None], window)
    appended = tf.where(full[:, None], shifted, inserted)
    real = tf.not_equal(token, features.PAD_ID)
    return (tf.where(real[:, None], appended, window),
            tf.where(real, tf.minimum(length + 1, width), length))


def _sample(logits: tf.Tensor, k: tf.Tensor, temperature: tf.Tensor) -> tf.Tensor:
    """One id per row, drawn from the ``k`` largest logits scaled by ``1 / temperature``."""
    top = tf.math.top_k(logits / temperature, k=k)
    choice = tf.random.categorical(top.values, 1, dtype=tf.int32)
    return tf.cast(tf.gather(top.indices, choice, batch_dims=1)[:, 0], tf.int64)

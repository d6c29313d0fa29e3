"""Export the seq2seq model as a TF Serving SavedModel with its signatures.

- ``serving_default``: serialized tf.Examples (only ``context`` is required) ->
  ``probabilities`` [batch, vocab] (the next-token distribution: the decoder's first step
  after START, mixed with the corpus's n-gram counts: models/seq2seq/blend.py),
  ``top_k_tokens`` / ``top_k_probabilities`` [batch, 5]. TFMA scores it.
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
  emitted. Each token is drawn from the network and the counts mixed by ``generate_weights`` (chosen
  for log-likelihood, where ``serving_default``'s mix is chosen for top-5: ``blend.fit_generation_share``).
  The loop is a graph while-loop, so TF Serving runs it with no Python. Sampling
  draws from the ``top_k`` most likely tokens, then the smallest set of them reaching
  ``top_p`` float32 (1: all k), after dividing the log-probabilities by ``temperature``;
  ``repetition_penalty`` float32 (1: off) and ``no_repeat_ngram`` int32 (0: off) keep a
  continuation from looping; ``seed`` int64 makes a draw reproducible
  (models/seq2seq/decoding.py). Every input is required (a SavedModel signature has no
  defaults): ``GENERATE_DEFAULTS`` are the CLI's.

TF Serving REST: scalars need the columnar ("inputs") request form, e.g.
``POST /v1/models/seq2seq:predict`` with
``{"signature_name": "generate", "inputs": {"prompts": ["the for statement is used"],
"max_new_tokens": 12, "top_k": 5, "temperature": 0.8, "stop_at": ". ? !", "top_p": 0.9,
"repetition_penalty": 1.2, "no_repeat_ngram": 3, "seed": 7}}`` ->
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
from models.seq2seq import blend, decoding, features
from models.seq2seq.model import Seq2Seq

GENERATE_SIGNATURE = "generate"
MAX_NEW_TOKENS = 256    # upper bound of the decode loop, whatever the request asks
TOP_K_OUTPUTS = 5
UNKNOWN_TOKEN = "<unk>"  # printable name of the OOV id
_WARMUP_PROMPT = b"the"
#: What a caller of ``generate`` sends when it has no opinion (the CLI's defaults): greedy, with
#: the repetition rules on, so that a continuation does not loop (models/seq2seq/decoding.py).
GENERATE_DEFAULTS = {
    "max_new_tokens": np.int32(20), "top_k": np.int32(1), "temperature": np.float32(1.0), "stop_at": "",
    "top_p": np.float32(1.0), "repetition_penalty": np.float32(1.2), "no_repeat_ngram": np.int32(3),
    "seed": np.int64(0)}


def generate_request(prompts: Sequence[str], accepted: Sequence[str] | None = None, **settings) -> dict:
    """``generate``'s keyword arguments as tensors: ``GENERATE_DEFAULTS`` overridden by ``settings``.

    ``accepted``: the input names of the signature at hand; others are left out (a model
    exported before an input existed ignores it: it decodes as it always did).
    """
    unknown = set(settings) - set(GENERATE_DEFAULTS)
    if unknown:
        raise ValueError(f"unknown generate settings {sorted(unknown)}; known: {sorted(GENERATE_DEFAULTS)}")
    request = {"prompts": tf.constant(list(prompts), tf.string)}
    for key, default in GENERATE_DEFAULTS.items():
        value = settings.get(key, default)
        request[key] = tf.constant(value, tf.string if isinstance(default, str) else np.asarray(default).dtype)
    return {key: value for key, value in request.items() if accepted is None or key in accepted}


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
        probabilities = next_token_probabilities(model, transformed[features.CONTEXT_XF])
        top = tf.math.top_k(probabilities, k=TOP_K_OUTPUTS)
        return {
            "probabilities": probabilities,
            "top_k_tokens": tf.gather(names, top.indices),
            "top_k_probabilities": top.values,
        }

    signatures.save_serving_model(model, export_dir, {
        "serving_default": signatures.examples_signature(model, raw_spec, next_token_outputs),
        "transform_features": signatures.transform_features_signature(model, tf_transform_output),
        GENERATE_SIGNATURE: _generate_function(model, names, raw_spec[features.CONTEXT].shape),
    })
    warmup.write_warmup_requests(export_dir, [
        ("serving_default", {"examples": np.array(
            [warmup.zero_example(raw_spec, {features.CONTEXT: _WARMUP_PROMPT})], dtype=object)}),
        (GENERATE_SIGNATURE, {**{key: np.array(value.encode(), dtype=object) if isinstance(value, str) else
                                 np.asarray(value) for key, value in GENERATE_DEFAULTS.items()},
                              "max_new_tokens": np.asarray(np.int32(2)),
                              "prompts": np.array([_WARMUP_PROMPT], dtype=object)}),
    ])


def next_token_probabilities(model: Seq2Seq, context_ids: tf.Tensor,
                             ngram_parts: dict[str, tf.Tensor] | None = None, weights: tf.Variable | None = None
                             ) -> tf.Tensor:
    """[batch, V] served next-token distribution: the network mixed with the n-gram counts when
    the Trainer attached them (``model.ngram``, ``model.blend_weights``: models/seq2seq/blend.py),
    else the network alone. ``ngram_parts``: ``model.ngram.probabilities(context_ids)``, when the
    caller has them already; ``weights``: another mix of the same parts (``generate``'s)."""
    network = tf.nn.softmax(model.next_token_logits(context_ids))
    if getattr(model, "ngram", None) is None:
        return network
    parts = model.ngram.probabilities(context_ids) if ngram_parts is None else ngram_parts
    return blend.mix(model.blend_weights if weights is None else weights, network, parts)


def generation_weights(model: Seq2Seq) -> tf.Variable | None:
    """The mix ``generate`` draws from (``model.generate_weights``, chosen by log-likelihood:
    ``blend.fit_generation_share``), or None (the served mix) on a model the Trainer gave none."""
    return getattr(model, "generate_weights", None)


def _generate_function(model: Seq2Seq, names: tf.Tensor, context_shape: Sequence[int]):
    vocab_size = model.vocab_size
    # END is never emitted: the model learned it at the end of a training window, which is
    # an arbitrary cut, not the end of the text. Only the caller's ``stop_at`` stops early.
    banned = [features.PAD_ID, features.START_ID, features.END_ID] + list(
        range(vocab_size - features.NUM_OOV_BUCKETS, vocab_size))
    bias = tf.constant([decoding.BANNED if i in banned else 0.0 for i in range(vocab_size)], tf.float32)

    @tf.function(input_signature=[
        tf.TensorSpec([None], tf.string, name="prompts"),
        tf.TensorSpec([], tf.int32, name="max_new_tokens"),
        tf.TensorSpec([], tf.int32, name="top_k"),
        tf.TensorSpec([], tf.float32, name="temperature"),
        tf.TensorSpec([], tf.string, name="stop_at"),
        tf.TensorSpec([], tf.float32, name="top_p"),
        tf.TensorSpec([], tf.float32, name="repetition_penalty"),
        tf.TensorSpec([], tf.int32, name="no_repeat_ngram"),
        tf.TensorSpec([], tf.int64, name="seed"),
    ])
    def generate(prompts, max_new_tokens, top_k, temperature, stop_at, top_p, repetition_penalty,
                 no_repeat_ngram, seed):
        # The raw feature may be [batch] or [batch, 1] (SchemaGen's infer_feature_shape).
        raw = tf.reshape(prompts, [-1, *context_shape])
        window = model.tft_layer({features.CONTEXT: raw})[features.CONTEXT_XF]
        length = tf.reduce_sum(tf.cast(tf.not_equal(window, features.PAD_ID), tf.int32), axis=1)
        stops = tf.strings.split(tf.strings.lower(stop_at, encoding="utf-8"))
        batch = tf.shape(prompts)[0]
        steps = tf.clip_by_value(max_new_tokens, 0, MAX_NEW_TOKENS)
        done = tf.zeros([batch], tf.bool)
        # The whole text so far (prompt window, then generated tokens), for the repetition rules.
        history = decoding.left_aligned(window, length)
        generated = tf.zeros([batch, 0], tf.int64)
        given = tf.zeros([batch, 0], tf.float32)   # the served model's probability of each generated token
        for step in tf.range(steps):
            tf.autograph.experimental.set_loop_options(
                shape_invariants=[(generated, tf.TensorShape([None, None])),
                                  (given, tf.TensorShape([None, None])),
                                  (history, tf.TensorShape([None, None]))])
            if tf.reduce_all(done):
                break
            # The sliding window: the model reads the last context tokens, generated ones included,
            # and predicts the first token after them (what it is trained and evaluated on).
            probabilities = next_token_probabilities(model, window, weights=generation_weights(model))
            log_probs = tf.math.log(probabilities + 1e-12)
            log_probs = decoding.penalise_repeats(log_probs, decoding.presence(history, vocab_size),
                                                  repetition_penalty) + bias
            log_probs = tf.where(decoding.repeated_ngram_ban(history, no_repeat_ngram, vocab_size),
                                 decoding.BANNED, log_probs)
            token = decoding.choose(log_probs, top_k, top_p, temperature, seed, step)
            token = tf.where(done, tf.constant(features.PAD_ID, tf.int64), token)
            window, length = _append(window, length, token)
            hit = tf.reduce_any(tf.equal(tf.gather(names, token)[:, None], stops[None, :]), axis=1)
            done = tf.logical_or(done, hit)
            generated = tf.concat([generated, token[:, None]], axis=1)
            given = tf.concat([given, tf.gather(probabilities, tf.maximum(token, 0), batch_dims=1)[:, None]], axis=1)
            history = tf.concat([history, token[:, None]], axis=1)
        keep = tf.not_equal(generated, features.PAD_ID)
        words = tf.ragged.boolean_mask(tf.gather(names, generated), keep)
        return {"continuations": tf.strings.reduce_join(words, axis=1, separator=" "),
                "token_counts": tf.cast(words.row_lengths(), tf.int32),
                # Before the repetition rules and the draw: what the model itself gave each token (0 after the end).
                "token_probabilities": tf.ragged.boolean_mask(given, keep).to_tensor(0.0)}

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

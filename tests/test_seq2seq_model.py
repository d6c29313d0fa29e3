"""Seq2seq family: preprocessing through real tft_beam, model, training, export signatures,
n-gram baselines, perplexity metric and the TFMA config."""
import json
import math

import numpy as np
import pytest
import tensorflow as tf
from conftest import analyze_and_transform
from support.records import replay_warmup_requests

from models.common.inputs import make_dataset
from models.seq2seq import evaluation, export, features
from models.seq2seq.baselines import ngram_baselines
from models.seq2seq.model import build_seq2seq, teacher_forcing
from models.seq2seq.preprocessing import preprocessing_fn, tokenize, word_starts

CONTEXT_TOKENS, TARGET_TOKENS, VOCAB_SIZE = 6, 4, 12
# Exactly VOCAB_SIZE distinct tokens, each frequent; "the" the most frequent of all.
SENTENCES = "the cat sat on the mat . the dog ran in the park . a bird sat on the cat .".split()
# Rows with a known transformation, appended after the windows of the synthetic text;
# "zebra" and "," occur only here, once, so top_k leaves them out.
SHORT_CONTEXT = {"context": b"The cat", "target": b"the dog"}
LONG_TARGET = {"context": b"the dog ran in the park . a bird sat", "target": b"Zebra, the cat sat"}


def _rows():
    text = SENTENCES * 12
    rows = [{"context": " ".join(text[i:i + 5]).encode(), "target": " ".join(text[i + 5:i + 7]).encode()}
            for i in range(len(text) - 7)]
    return rows + [SHORT_CONTEXT, LONG_TARGET]


@pytest.fixture(scope="module")
def s2s_transform(tmp_path_factory):
    """(TFTransformOutput, raw rows, transformed rows) for the synthetic corpus."""
    raw_spec = {k: tf.io.FixedLenFeature([], tf.string) for k in (features.CONTEXT, features.TARGET)}
    rows = _rows()
    tft_output, transformed = analyze_and_transform(
        preprocessing_fn, raw_spec, rows, tmp_path_factory.mktemp("s2s-tft"),
        custom_config={features.VOCAB_SIZE: VOCAB_SIZE, features.CONTEXT_TOKENS: CONTEXT_TOKENS,
                       features.TARGET_TOKENS: TARGET_TOKENS, "code_version": "ignored"})
    return tft_output, rows, transformed


def _ids(tft_output):
    vocab = [v.decode() for v in tft_output.vocabulary_by_name(features.VOCABULARY)]
    return vocab, {token: i for i, token in enumerate(vocab)}


# -------------------------------------------------------------------- preprocessing


def test_tokenize_lowercases_and_splits_punctuation():
    got = tokenize(tf.constant(['Hello, World! "__init__()" -> x...', "Ünïcode  —  ok"]))
    assert [[t.decode() for t in row] for row in got.to_list()] == [
        ["hello", ",", "world", "!", '"', "__", "init", "__", "(", ")", '"', "-", ">", "x", "..."],
        ["ünïcode", "—", "ok"]]


def test_word_starts_flag_the_first_token_of_each_whitespace_word():
    text = ['Hello, World! "__init__()" -> x...', "Ünïcode  —  ok", "", "  a\tb\n"]
    got = word_starts(tf.constant(text)).to_list()
    assert got == [[1, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0], [1, 1, 1], [], [1, 1]]
    assert [len(row) for row in got] == [len(row) for row in tokenize(tf.constant(text)).to_list()]


def test_vocabulary_reserved_tokens_top_k_and_oov(s2s_transform):
    tft_output, _, transformed = s2s_transform
    vocab, ids = _ids(tft_output)
    assert vocab[:3] == list(features.RESERVED_TOKENS) == ["<pad>", "<s>", "</s>"]
    assert (features.PAD_ID, features.START_ID, features.END_ID) == (0, 1, 2)
    assert len(vocab) == 3 + VOCAB_SIZE  # top_k counts the corpus tokens, not the reserved ones
    assert vocab[3] == "the"  # the most frequent token
    assert "zebra" not in ids and "," not in ids  # seen once: cut by top_k
    oov = len(vocab)
    long_row = transformed[-1]
    assert long_row[features.TARGET_XF][0] == oov == long_row[features.NEXT_TOKEN_XF]
    assert export.vocabulary_tokens(tft_output)[oov] == export.UNKNOWN_TOKEN


def test_sequences_are_padded_truncated_and_shifted(s2s_transform):
    tft_output, _, transformed = s2s_transform
    _, ids = _ids(tft_output)
    spec = tft_output.transformed_feature_spec()
    assert spec[features.CONTEXT_XF].shape == [CONTEXT_TOKENS]
    assert spec[features.DECODER_INPUT_XF].shape == spec[features.TARGET_XF].shape == [TARGET_TOKENS]

    short, long_row = transformed[-2], transformed[-1]
    # Short context: right-padded with 0; short target: END, then padding.
    assert list(short[features.CONTEXT_XF]) == [ids["the"], ids["cat"], 0, 0, 0, 0]
    assert list(short[features.TARGET_XF]) == [ids["the"], ids["dog"], features.END_ID, 0]
    assert list(short[features.DECODER_INPUT_XF]) == [features.START_ID, ids["the"], ids["dog"], 0]
    assert short[features.NEXT_TOKEN_XF] == ids["the"]
    # Long context: the LAST tokens are kept; long target: the FIRST tokens, no END.
    assert list(long_row[features.CONTEXT_XF]) == [ids[t] for t in "the park . a bird sat".split()]
    oov = len(ids)
    assert list(long_row[features.TARGET_XF]) == [oov, oov, ids["the"], ids["cat"]]
    assert list(long_row[features.DECODER_INPUT_XF]) == [features.START_ID, oov, oov, ids["the"]]
    # Word starts (for the Trainer's count models): "zebra ," is one word of two tokens; END and PAD begin none.
    assert list(short[features.CONTEXT_STARTS_XF]) == [1, 1, 0, 0, 0, 0]
    assert list(short[features.TARGET_STARTS_XF]) == [1, 1, 0, 0]
    assert list(long_row[features.CONTEXT_STARTS_XF]) == [1, 1, 1, 1, 1, 1]
    assert list(long_row[features.TARGET_STARTS_XF]) == [1, 0, 1, 1]
    for row in transformed:
        assert row[features.NEXT_TOKEN_XF] == row[features.TARGET_XF][0]
        # Teacher forcing: the target shifted right behind START (END is never fed back).
        shifted = [0 if t == features.END_ID else t for t in row[features.TARGET_XF][:-1]]
        assert list(row[features.DECODER_INPUT_XF][1:]) == shifted


# ----------------------------------------------------------------------------- model


def _write_transformed(rows, path):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for row in rows:
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(value=np.atleast_1d(v).tolist()))
                       for k, v in row.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())


def _raw_examples(rows, keys=(features.CONTEXT,)):
    return [tf.train.Example(features=tf.train.Features(feature={
        k: tf.train.Feature(bytes_list=tf.train.BytesList(value=[r[k]])) for k in keys}))
        .SerializeToString() for r in rows]


def test_model_shapes():
    model = build_seq2seq(vocab_size=50, context_tokens=7, target_tokens=3, embedding_dim=8, units=16)
    inputs = {features.CONTEXT_XF: tf.constant(np.random.randint(0, 50, (5, 7)), tf.int64),
              features.DECODER_INPUT_XF: tf.constant(np.random.randint(1, 50, (5, 3)), tf.int64)}
    assert model(inputs).shape == (5, 3, 50)
    assert model.next_token_logits(inputs[features.CONTEXT_XF]).shape == (5, 50)
    # Compiled for what the Trainer fits: Adam at the family's rate with gradients clipped, and a
    # loss that is the mean cross-entropy of each target token, written here from the logits.
    assert isinstance(model.optimizer, tf.keras.optimizers.Adam) and model.optimizer.clipnorm == 1.0
    assert float(model.optimizer.learning_rate) == pytest.approx(3e-3)
    targets = np.random.RandomState(0).randint(1, 50, (5, 3))
    logits = model(inputs).numpy().astype(np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    expected = -np.take_along_axis(log_probs, targets[..., None], -1).mean()
    measured = model.evaluate(inputs, targets, verbose=0, return_dict=True)
    assert measured["loss"] == pytest.approx(expected, rel=1e-4)
    gru = build_seq2seq(vocab_size=50, context_tokens=7, target_tokens=3, units=16, cell="gru")
    assert gru(inputs).shape == (5, 3, 50)


def test_dropout_follows_the_corpus_size_unless_a_user_or_a_tuner_set_it():
    from models.seq2seq import trainer

    defaults = dict(trainer.MODEL_DEFAULTS)
    small = trainer.corpus_dropout(defaults, set(), trainer.LARGE_CORPUS_WINDOWS - 1)
    large = trainer.corpus_dropout(defaults, set(), trainer.LARGE_CORPUS_WINDOWS)
    assert (small["dropout"], large["dropout"]) == (0.5, 0.2)  # as measured: docs/benchmarks.md
    assert defaults == trainer.MODEL_DEFAULTS  # the defaults themselves are left alone
    assert trainer.corpus_dropout({**defaults, "dropout": 0.4}, {"dropout"}, 10**6)["dropout"] == 0.4


@pytest.fixture(scope="module")
def trained(s2s_transform, tmp_path_factory):
    """Model trained a little on the synthetic corpus and exported: (model, history, export_dir)."""
    tft_output, _, transformed = s2s_transform
    tmp = tmp_path_factory.mktemp("s2s-train")
    _write_transformed(transformed, tmp / "train.tfrecord.gz")
    spec = tft_output.transformed_feature_spec()
    dataset = teacher_forcing(make_dataset(str(tmp / "*.tfrecord.gz"), spec, features.TARGET_XF, 32, seed=1))
    tf.keras.utils.set_random_seed(1)
    vocab_size = tft_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
    model = build_seq2seq(vocab_size, CONTEXT_TOKENS, TARGET_TOKENS, learning_rate=1e-2,
                          embedding_dim=16, units=32, dropout=0.0)
    history = model.fit(dataset, epochs=3, steps_per_epoch=15, verbose=0)
    export_dir = str(tmp / "export")
    export.export_serving_model(model, tft_output, export_dir)
    return model, history, export_dir


@pytest.fixture(scope="module")
def loaded(trained):
    """The export, loaded as TF Serving would."""
    return tf.saved_model.load(trained[2])


def test_training_reduces_loss(trained):
    _, history, _ = trained
    losses = history.history["loss"]
    assert losses[-1] < 0.8 * losses[0]
    assert history.history["accuracy"][-1] > history.history["accuracy"][0]
    assert "next_token_top5" in history.history  # the gate's metric, in every epoch line


def test_serving_default_gives_next_token_distribution(trained, loaded, s2s_transform):
    model = trained[0]
    tft_output, rows, transformed = s2s_transform
    assert {"serving_default", "transform_features", export.GENERATE_SIGNATURE} <= set(loaded.signatures)
    vocab_size = len(export.vocabulary_tokens(tft_output))

    out = loaded.signatures["serving_default"](examples=tf.constant(_raw_examples(rows[:6])))
    probabilities = out["probabilities"].numpy()
    assert probabilities.shape == (6, vocab_size)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    contexts = tf.constant(np.stack([r[features.CONTEXT_XF] for r in transformed[:6]]))
    expected = tf.nn.softmax(model.next_token_logits(contexts)).numpy()
    np.testing.assert_allclose(probabilities, expected, rtol=1e-4, atol=1e-6)
    assert out["top_k_tokens"].shape == (6, export.TOP_K_OUTPUTS)
    best = [export.vocabulary_tokens(tft_output)[i] for i in probabilities.argmax(axis=1)]
    assert [t.decode() for t in out["top_k_tokens"].numpy()[:, 0]] == best

    # TFMA reads the label through transform_features (raw examples carry the target).
    both = _raw_examples(rows[:6], keys=(features.CONTEXT, features.TARGET))
    labels = loaded.signatures["transform_features"](examples=tf.constant(both))[features.NEXT_TOKEN_XF]
    assert list(labels.numpy()) == [r[features.NEXT_TOKEN_XF] for r in transformed[:6]]


def _generate(loaded, prompts, max_new_tokens, top_k=1, temperature=1.0, stop_at="", counts=False, **rules):
    # The repetition rules are off unless asked: these tests check the window and the stops.
    rules = {"repetition_penalty": 1.0, "no_repeat_ngram": 0, **rules}  # seed, top_p: as given
    out = loaded.signatures[export.GENERATE_SIGNATURE](**export.generate_request(
        prompts, max_new_tokens=max_new_tokens, top_k=top_k, temperature=temperature, stop_at=stop_at, **rules))
    texts = [s.decode() for s in out["continuations"].numpy()]
    return (texts, list(out["token_counts"].numpy())) if counts else texts


def test_generate_greedy_and_sampled(loaded, s2s_transform):
    tft_output, _, _ = s2s_transform
    vocab, _ = _ids(tft_output)
    allowed = set(vocab) - set(features.RESERVED_TOKENS)
    prompts = ["the cat sat on the", "a bird sat on", "Zebra!"]

    greedy = _generate(loaded, prompts, 5)
    assert greedy == _generate(loaded, prompts, 5)  # greedy is deterministic
    tf.random.set_seed(0)
    sampled = _generate(loaded, prompts, 5, top_k=3, temperature=0.7)
    for text in greedy + sampled:
        tokens = text.split(" ")
        assert text and 1 <= len(tokens) <= 5, text
        assert set(tokens) <= allowed, text  # no pad/start/end/unknown tokens
    assert [len(t.split(" ")) for t in _generate(loaded, prompts, 1)] == [1, 1, 1]
    assert _generate(loaded, prompts, 0) == ["", "", ""]
    capped = _generate(loaded, prompts, 1000, top_k=5, temperature=2.0)
    assert all(len(t.split(" ")) <= export.MAX_NEW_TOKENS for t in capped)


@pytest.mark.parametrize("top_k,temperature", [(1, 1.0), (5, 0.8)])
def test_generate_continues_for_max_new_tokens(loaded, top_k, temperature):
    """32 tokens from a model trained on 2-token targets: the window slides, END never stops it."""
    prompts = ["the cat sat on the", "a bird", "Zebra!"]
    texts, counts = _generate(loaded, prompts, 32, top_k, temperature, counts=True)
    assert counts == [32, 32, 32]
    assert [len(t.split(" ")) for t in texts] == [32, 32, 32], texts


def test_generate_stops_only_on_the_callers_stop_tokens(loaded):
    prompts = ["the cat sat on the", "a bird sat on", "the dog ran in the"]
    free = _generate(loaded, prompts, 32)
    # A stop word the model certainly emits (the 4th word of the first free continuation), so
    # the test does not depend on how often a briefly trained model ends a sentence.
    stops = {".", "!", free[0].split(" ")[3]}
    stopped, counts = _generate(loaded, prompts, 32, stop_at=" ".join(sorted(stops)), counts=True)
    for text, full, count in zip(stopped, free, counts):
        tokens, full_tokens = text.split(" "), full.split(" ")
        assert len(tokens) == count
        first = next((i for i, token in enumerate(full_tokens) if token in stops), None)
        if first is None:
            assert text == full and count == 32
        else:  # greedy: the same tokens up to and including the first stop token
            assert tokens == full_tokens[:first + 1], (text, full, stops)
    assert counts[0] <= 4, (stopped, stops)


def _trigrams(tokens):
    return [tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)]


def test_generate_never_repeats_a_trigram_with_the_default_rules(loaded):
    """Greedy decoding of a 12-token vocabulary loops at once; the default rules must prevent it."""
    prompts = ["the cat sat on the", "a bird sat on"]
    looping = _generate(loaded, prompts, 24)  # rules off
    assert any(len(set(_trigrams(t.split()))) < len(_trigrams(t.split())) for t in looping), looping
    out = loaded.signatures[export.GENERATE_SIGNATURE](**export.generate_request(prompts, max_new_tokens=24))
    for text in (t.decode() for t in out["continuations"].numpy()):
        tokens = text.split()
        assert len(tokens) == 24, text
        assert len(set(_trigrams(tokens))) == len(_trigrams(tokens)), text


def test_sampling_is_reproducible_with_a_seed(loaded):
    prompts = ["the cat sat on the", "a bird"]
    settings = {"top_k": 8, "top_p": 0.95, "temperature": 1.5}
    first = _generate(loaded, prompts, 16, seed=3, **settings)
    tf.random.set_seed(99)  # the global seed plays no part
    assert _generate(loaded, prompts, 16, seed=3, **settings) == first
    others = {tuple(_generate(loaded, prompts, 16, seed=seed, **settings)) for seed in range(4, 9)}
    assert len(others | {tuple(first)}) > 1  # the seed does choose the draw


def test_top_p_keeps_the_nucleus_only():
    from models.seq2seq import decoding

    log_probs = tf.math.log(tf.constant([[0.6, 0.3, 0.05, 0.05]]))
    draws = {int(decoding.choose(log_probs, tf.constant(4), tf.constant(0.5), tf.constant(1.0),
                                 tf.constant(seed, tf.int64), tf.constant(0))[0]) for seed in range(40)}
    assert draws == {0}  # 0.6 alone reaches top_p 0.5
    draws = {int(decoding.choose(log_probs, tf.constant(4), tf.constant(0.85), tf.constant(1.0),
                                 tf.constant(seed, tf.int64), tf.constant(0))[0]) for seed in range(40)}
    assert draws == {0, 1}


def test_generate_through_tf_serving_rest_columnar_form(loaded):
    from support.tf_serving_rest import predict

    answer = predict(loaded, {"signature_name": export.GENERATE_SIGNATURE, "inputs": {
        "prompts": ["the cat sat on the", "a bird"], "max_new_tokens": 32, "top_k": 5, "temperature": 0.8,
        "stop_at": "", "top_p": 0.9, "repetition_penalty": 1.2, "no_repeat_ngram": 3, "seed": 7}})
    outputs = answer["outputs"]
    assert outputs["token_counts"] == [32, 32]
    assert [len(t.split(" ")) for t in outputs["continuations"]] == [32, 32]


# ------------------------------------------------------------------------- baselines


def _write_windows(path, windows):
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for context, next_token in windows:
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                features.CONTEXT_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=context)),
                features.NEXT_TOKEN_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=[next_token])),
            })).SerializeToString())


def test_ngram_baselines_on_hand_made_windows(tmp_path):
    # Last context token -> next token. Unigram top 5 (ties by smaller id): 20, 22, 21, 23, 24.
    train = ([([5, 10, 0, 0], 20)] * 3 + [([7, 10, 0, 0], 21)] + [([9, 11, 0, 0], 22)] * 2
             + [([11, 0, 0, 0], 23), ([3, 4, 12, 0], 24), ([12, 0, 0, 0], 25)])
    evaluation_windows = [
        ([1, 10, 0, 0], 21),   # unigram hit, bigram hit (10 -> 20, 21)
        ([8, 12, 0, 0], 25),   # unigram miss, bigram hit (12 -> 24, 25)
        ([13, 0, 0, 0], 25),   # unseen last token: backs off to unigram, miss
        ([2, 11, 0, 0], 20),   # unigram hit; bigram 11 -> 22, 23, topped up with 20 from unigram
        ([6, 10, 0, 0], 26),   # miss both
    ]
    _write_windows(tmp_path / "train.tfrecord.gz", train)
    _write_windows(tmp_path / "eval.tfrecord.gz", evaluation_windows)
    result = ngram_baselines(str(tmp_path / "train.tfrecord.gz"), [str(tmp_path / "eval.tfrecord.gz")])
    assert result == {"unigram_top5": pytest.approx(2 / 5), "bigram_top5": pytest.approx(3 / 5),
                      "eval_examples": 5}
    json.dumps(result)  # the trainer writes it as JSON


# ----------------------------------------------------------------- metrics and TFMA


def _keras_scores(labels, probabilities, k):
    """The Keras metrics the Evaluator used before (the oracle): top-1, top-k, cross-entropy, perplexity."""
    import tf_keras

    values = []
    for metric in (tf_keras.metrics.SparseCategoricalAccuracy(), tf_keras.metrics.SparseTopKCategoricalAccuracy(k=k),
                   tf_keras.metrics.SparseCategoricalCrossentropy()):
        metric.update_state(labels, probabilities)
        values.append(float(metric.result().numpy()))
    return values + [math.exp(values[2])]


def _next_token_values(labels, probabilities, k, classes=None):
    """The TFMA-native metrics run as TFMA runs them: each metric's combiner, then its derived result."""
    from tensorflow_model_analysis.metrics import metric_types

    from models.seq2seq import metrics as next_token

    config = evaluation.eval_config(min_top5=0.0, max_regression=0.01)
    values = []
    for cls in classes or (next_token.NextTokenAccuracy, next_token.NextTokenTopKAccuracy,
                           next_token.NextTokenCrossEntropy, next_token.NextTokenPerplexity):
        combiner_step, derived = cls(k=k).computations(eval_config=config)
        combiner = combiner_step.combiner
        halves = []
        for part in (slice(0, len(labels) // 2), slice(len(labels) // 2, None)):  # merged like Beam's partials
            accumulator = combiner.create_accumulator()
            for label, prediction in zip(labels[part], probabilities[part]):
                accumulator = combiner.add_input(accumulator, metric_types.StandardMetricInputs(
                    labels=np.array([label]), predictions=prediction, example_weights=np.array([1.0])))
            halves.append(accumulator)
        totals = combiner.extract_output(combiner.merge_accumulators(halves))
        (value,) = derived.result(totals).values()
        values.append(value)
    return values


def test_next_token_metrics_equal_the_keras_metrics_they_replace():
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(50) * 0.3, size=200).astype(np.float32)
    probabilities[:20] = 0.02  # uniform rows: every class ties at the top-k boundary
    probabilities[20:25] = 0.0
    probabilities[20:25, 7] = 1.0  # certain rows: the clipping of 0 and 1
    labels = rng.integers(0, 50, 200)
    for k in (1, 5):
        assert _next_token_values(labels, probabilities, k) == pytest.approx(_keras_scores(labels, probabilities, k),
                                                                             rel=1e-5)


def test_known_next_word_metrics_leave_out_the_oov_label():
    """Top-1/top-k on known next words: the Keras metrics on the rows whose label is not the OOV id (the last)."""
    from models.seq2seq import metrics as next_token

    rng = np.random.default_rng(4)
    probabilities = rng.dirichlet(np.ones(30) * 0.3, size=120).astype(np.float32)
    probabilities[:30, 29] = 1.0  # OOV ranked first where it is the label: a hit the known figures leave out
    labels = rng.integers(0, 29, 120)
    labels[:30] = 29
    known = labels != 29
    classes = (next_token.NextTokenKnownAccuracy, next_token.NextTokenKnownTopKAccuracy)
    for k in (1, 5):
        expected = _keras_scores(labels[known], probabilities[known], k)[:2]
        assert _next_token_values(labels, probabilities, k, classes) == pytest.approx(expected, rel=1e-5)
        assert _next_token_values(labels, probabilities, k)[:2] != pytest.approx(expected, rel=1e-3)
    # No known next word at all: NaN, which the run summary leaves out.
    assert all(math.isnan(v) for v in _next_token_values(labels[:30], probabilities[:30], 5, classes))


def test_next_token_metrics_share_one_combiner():
    """TFMA de-duplicates computations by keys and combiner name: four metrics, one pass over the examples."""
    from models.seq2seq import metrics as next_token

    combiners = {cls().computations()[0].keys[0] for cls in (
        next_token.NextTokenAccuracy, next_token.NextTokenTopKAccuracy, next_token.NextTokenCrossEntropy,
        next_token.NextTokenPerplexity, next_token.NextTokenKnownAccuracy, next_token.NextTokenKnownTopKAccuracy)}
    assert len(combiners) == 1


def test_eval_config_gates_top5_on_the_overall_slice_only():
    config = evaluation.eval_config(min_top5=0.4, max_regression=0.02)
    spec = config.model_specs[0]
    assert spec.label_key == features.NEXT_TOKEN_XF and spec.prediction_key == "probabilities"
    assert list(spec.preprocessing_function_names) == ["transform_features"]
    assert [list(s.feature_keys) for s in config.slicing_specs] == [[], ["document"], ["position"]]
    assert not config.options.include_default_metrics.value
    assert spec.model_type == "tf_generic"
    metrics = {m.class_name: m for m in config.metrics_specs[0].metrics}
    assert set(metrics) == {"ExampleCount", "NextTokenAccuracy", "NextTokenTopKAccuracy", "NextTokenCrossEntropy",
                            "NextTokenPerplexity", "NextTokenKnownAccuracy", "NextTokenKnownTopKAccuracy"}
    assert all(m.module == "models.seq2seq.metrics" for name, m in metrics.items() if name != "ExampleCount")
    gate = metrics["NextTokenTopKAccuracy"]
    (per_slice,) = gate.per_slice_thresholds
    assert [list(s.feature_keys) for s in per_slice.slicing_specs] == [[]]
    assert per_slice.threshold.value_threshold.lower_bound.value == 0.4
    assert per_slice.threshold.change_threshold.absolute.value == -0.02
    assert sum(1 for m in metrics.values() if m.per_slice_thresholds) == 1


def test_tfma_computes_gate_metric_and_perplexity_per_slice(trained, s2s_transform, tmp_path):
    """Real TFMA run over the export: metric names, custom metric import, slices, blessing."""
    from stackenv.tfma import tfma

    from tensorflow_model_analysis.utils import config_util

    _, _, export_dir = trained
    _, rows, _ = s2s_transform
    keys = (features.CONTEXT, features.TARGET, features.DOCUMENT, features.POSITION)
    data = [dict(r, document=[b"doc-a", b"doc-b"][i % 2], position=b"start") for i, r in enumerate(rows[:40])]
    with tf.io.TFRecordWriter(str(tmp_path / "eval.tfrecord")) as writer:
        for record in _raw_examples(data, keys):
            writer.write(record)
    # As TFX's Evaluator on a later run: a baseline model (here the same export) is compared.
    config = config_util.update_eval_config_with_defaults(
        evaluation.eval_config(min_top5=0.0, max_regression=0.01), has_baseline=True)
    models = [tfma.default_eval_shared_model(export_dir, model_name=name, eval_config=config)
              for name in (tfma.CANDIDATE_KEY, tfma.BASELINE_KEY)]
    tfma.run_model_analysis(eval_shared_model=models, eval_config=config,
                            data_location=str(tmp_path / "eval.tfrecord"), output_path=str(tmp_path / "tfma"))
    result = tfma.load_eval_result(str(tmp_path / "tfma"), model_name=tfma.CANDIDATE_KEY)
    by_slice = {key: metrics[""][""] for key, metrics in result.slicing_metrics}
    overall = by_slice[()]
    assert {evaluation.GATE_METRIC, evaluation.ACCURACY, evaluation.PERPLEXITY,
            evaluation.CROSS_ENTROPY, "example_count"} <= set(overall)
    assert overall["example_count"]["doubleValue"] == 40
    assert 0.0 <= overall[evaluation.ACCURACY]["doubleValue"] <= overall[evaluation.GATE_METRIC]["doubleValue"]
    assert overall[evaluation.PERPLEXITY]["doubleValue"] == pytest.approx(
        math.exp(overall[evaluation.CROSS_ENTROPY]["doubleValue"]), rel=1e-3)
    assert ((("document", "doc-a"),) in by_slice) and ((("position", "start"),) in by_slice)
    assert tfma.load_validation_result(str(tmp_path / "tfma")).validation_ok


def test_export_carries_tf_serving_warmup_requests_that_run(trained, loaded):
    from models.common import warmup

    requests = warmup.read_warmup_requests(trained[2])
    assert [name for name, _ in requests] == ["serving_default", export.GENERATE_SIGNATURE]
    for name, inputs in requests:  # what TF Serving does before the version takes traffic
        outputs = loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
        first = next(iter(outputs.values()))
        assert first.shape[0] == 1, name
    assert replay_warmup_requests(loaded, trained[2]) == 2


def _functions_in(export_dir):
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(f"{export_dir}/saved_model.pb", "rb") as handle:
        proto.ParseFromString(handle.read())
    return len(proto.meta_graphs[0].graph_def.library.function)


def test_export_keeps_signatures_not_keras_layer_traces_and_warm_starts(trained, s2s_transform, tmp_path):
    """Every load rebuilds every function the SavedModel holds (each Evaluator, ``predict``); the
    export leaves out the per-layer traces Keras adds to ``tf.saved_model.save``, and the variables
    checkpoint that warm start reads still restores every weight."""
    from models.common.warm_start import WarmStarter, write_record

    model, _, export_dir = trained
    traced = str(tmp_path / "traced")
    tf.saved_model.save(model, traced)   # what Keras saves of the same model with its layer traces
    assert _functions_in(export_dir) < _functions_in(traced) / 2
    identity = {"family": "seq2seq"}
    write_record(export_dir, identity, WarmStarter(False, None, identity).decision)
    tf.keras.utils.set_random_seed(9)
    warm = WarmStarter(True, export_dir, identity, lambda _: None)
    restored = warm.build(lambda: build_seq2seq(model.vocab_size, CONTEXT_TOKENS, TARGET_TOKENS,
                                                embedding_dim=16, units=32, dropout=0.0))
    assert warm.decision.source == export_dir
    assert all(np.array_equal(a, b) for a, b in zip(restored.get_weights(), model.get_weights()))
    assert len(restored.get_weights()) == len(model.get_weights())


def test_learning_rate_schedule_choice():
    cosine = build_seq2seq(VOCAB_SIZE, CONTEXT_TOKENS, TARGET_TOKENS, learning_rate=0.01, embedding_dim=4, units=4,
                           lr_schedule="cosine", total_steps=100)
    config = cosine.optimizer.get_config()["learning_rate"]
    schedule = tf.keras.optimizers.schedules.deserialize(config)
    assert isinstance(schedule, tf.keras.optimizers.schedules.CosineDecay)
    assert schedule(0).numpy() == pytest.approx(0.01) and schedule(100).numpy() == pytest.approx(0.001)
    constant = build_seq2seq(VOCAB_SIZE, CONTEXT_TOKENS, TARGET_TOKENS, embedding_dim=4, units=4)
    assert constant.optimizer.get_config()["learning_rate"] == pytest.approx(3e-3)
    with pytest.raises(ValueError, match="lr_schedule"):
        build_seq2seq(VOCAB_SIZE, CONTEXT_TOKENS, TARGET_TOKENS, lr_schedule="step")


def test_smoothed_cross_entropy_is_keras_cross_entropy_with_smoothed_labels():
    from models.seq2seq.model import SmoothedCrossEntropy

    logits = tf.random.stateless_normal([3, 4, 7], seed=[1, 2])
    labels = tf.constant([[1, 2, 3, 0], [6, 5, 4, 0], [0, 1, 1, 2]], tf.int64)
    none = tf.keras.losses.Reduction.NONE
    plain = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=none)(labels, logits)
    np.testing.assert_allclose(SmoothedCrossEntropy(0.0).call(labels, logits), plain, rtol=1e-5)
    smoothed = tf.keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1, reduction=none)(
        tf.one_hot(labels, 7), logits)
    got = SmoothedCrossEntropy(0.1).call(labels, logits)
    np.testing.assert_allclose(got, smoothed, rtol=1e-5)
    assert not np.allclose(got, plain)


def test_next_token_top5_scores_only_the_first_target_token():
    from models.seq2seq.model import FirstTokenTopK

    vocab = 8
    labels = tf.constant([[7, 7, 7], [7, 7, 7]], tf.int64)
    # Row 0: token 7 ranked first at position 0, last elsewhere; row 1: last everywhere.
    scores = np.tile(np.arange(vocab, 0, -1, dtype=np.float32), (2, 3, 1))
    scores[0, 0, 7] = 100.0
    metric = FirstTokenTopK(k=5)
    metric.update_state(labels, tf.constant(scores), sample_weight=tf.ones([2, 3]))
    assert metric.result().numpy() == pytest.approx(0.5)
    every = tf.keras.metrics.SparseTopKCategoricalAccuracy(k=5)
    every.update_state(labels, tf.constant(scores), sample_weight=tf.ones([2, 3]))
    assert every.result().numpy() == pytest.approx(1 / 6)
    padded = FirstTokenTopK(k=5)  # a padded first position does not count
    padded.update_state(labels, tf.constant(scores), sample_weight=tf.constant([[0.0, 1, 1], [1, 1, 1]]))
    assert padded.result().numpy() == pytest.approx(0.0)


def test_generate_draws_from_its_own_mix_and_serving_default_from_the_served_one(s2s_transform, tmp_path):
    """The Trainer gives the export two mixes of the same parts (models/seq2seq/blend.py): ``blend_weights`` (top-5,
    what ``serving_default`` and so the gate score) and ``generate_weights`` (log-likelihood, what ``generate`` draws
    from). Exported with the network alone served and the Kneser-Ney counts alone drawn from, the greedy first token
    must be the one the counts rank first, at the counts' probability, where the network (untrained, nearly
    uniform) ranks the tokens otherwise."""
    from models.seq2seq import kneser_ney, ngram

    tft_output, _, _ = s2s_transform
    vocab, index = _ids(tft_output)
    vocab_size = tft_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
    stream = np.array([index[w] for w in SENTENCES * 12], np.int64)
    tf.keras.utils.set_random_seed(3)
    model = build_seq2seq(vocab_size, CONTEXT_TOKENS, TARGET_TOKENS, embedding_dim=8, units=8, dropout=0.0)
    model.ngram = ngram.ServedCounts(kneser_ney.fit(stream, vocab_size, 3))
    model.blend_weights = tf.Variable([1.0, 0.0, 0.0, 0.0], trainable=False, name="blend_weights")
    model.generate_weights = tf.Variable([0.0, 1.0, 0.0, 0.0], trainable=False, name="generate_weights")
    export.export_serving_model(model, tft_output, str(tmp_path / "export"))
    loaded = tf.saved_model.load(str(tmp_path / "export"))
    prompt = "the cat sat on the"
    example = _raw_examples([{features.CONTEXT: prompt.encode(), features.TARGET: b"mat ."}])
    allowed = np.array([i >= len(features.RESERVED_TOKENS) and i < len(vocab) for i in range(vocab_size)])

    def served_distribution():
        return loaded.signatures["serving_default"](examples=tf.constant(example))["probabilities"].numpy()[0]

    network = served_distribution()
    out = loaded.signatures[export.GENERATE_SIGNATURE](**export.generate_request(
        [prompt], max_new_tokens=1, top_k=1, temperature=1.0, stop_at="", repetition_penalty=1.0, no_repeat_ngram=0))
    loaded.blend_weights.assign([0.0, 1.0, 0.0, 0.0])  # the counts alone, through the same signature
    counts = served_distribution()
    first = out["continuations"].numpy()[0].decode()
    assert first == vocab[int(np.argmax(np.where(allowed, counts, -1)))]
    assert first != vocab[int(np.argmax(np.where(allowed, network, -1)))]
    assert out["token_probabilities"].numpy()[0, 0] == pytest.approx(counts[index[first]], rel=1e-5)
    assert counts[index[first]] > 2 * network[index[first]]

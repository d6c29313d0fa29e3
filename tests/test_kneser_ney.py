"""The Kneser-Ney reference (models/seq2seq/kneser_ney.py): probabilities checked against arithmetic done
by hand here, the order fallback on tiny texts, the train text rebuilt from stride-2 windows, and a
reference that cannot be fitted left out of the gate and named in the summary."""
import numpy as np
import pytest
import tensorflow as tf
from support.text_windows import windows

from models.seq2seq import baselines, kneser_ney
from models.seq2seq.trainer import reference_scores
from pipeline.results import gate_summary

# Ids 0-2 are PAD, START, END; a, b, c, d are the four non-reserved ids of a 7-id vocabulary.
V = 7
A, B, C, D = 3, 4, 5, 6
LABEL = "Top-5 next-word accuracy"


def _p(tables: dict, context: list[int]) -> np.ndarray:
    """Next-token probabilities after ``context`` (right-padded to 6 ids, as the Trainer's windows are)."""
    row = np.array([context + [0] * (6 - len(context))], np.int64)
    return kneser_ney.KneserNey(tables).probabilities(tf.constant(row)).numpy()[0]


def test_bigram_kneser_ney_on_a_hand_made_text():
    # Text: a b a c a b. Bigram occurrences (the highest order counts occurrences): ab 2, ba 1, ac 1, ca 1.
    #   count-of-counts n1=3, n2=1, n3=0: Y = 3/(3+2) = 0.6, D1 = 1 - 2*0.6*1/3 = 0.6,
    #   D2 = 2 - 3*0.6*0/1 = 2 (not below 2: falls back to 1.0), D3+ (n3 = 0) falls back to 1.5.
    # Unigram continuation counts (distinct tokens before): a {b, c} 2, b {a} 1, c {a} 1; total 4.
    #   n1=2, n2=1: Y = 2/4 = 0.5, D1 = 1 - 2*0.5*1/2 = 0.5, D2 = 2 - 0 = 2 -> falls back to 1.0.
    #   gamma = (0.5*2 + 1.0*1)/4 = 0.5, uniform over the 4 non-reserved ids = 0.25:
    #   p1(a) = (2-1)/4 + 0.5*0.25 = 0.375, p1(b) = p1(c) = (1-0.5)/4 + 0.125 = 0.25, p1(d) = 0.125.
    tables = kneser_ney.fit(np.array([A, B, A, C, A, B]), V, max_order=2)
    assert int(tables["order"]) == 2
    unigram = _p(tables, [D])  # d never had a follower: the bigram passes the unigram through
    assert unigram[[A, B, C, D]] == pytest.approx([0.375, 0.25, 0.25, 0.125], abs=1e-6)
    assert unigram[:3] == pytest.approx([0, 0, 0])
    # After a: followers b (2), c (1), total 3. b: (2 - 1.0)/3 = 1/3, c: (1 - 0.6)/3 = 0.4/3,
    #   gamma(a) = (0.6*1 + 1.0*1)/3 = 1.6/3.
    #   p(b|a) = 1/3 + (1.6/3)*0.25 = 0.466667; p(c|a) = 0.4/3 + (1.6/3)*0.25 = 0.266667;
    #   p(a|a) = (1.6/3)*0.375 = 0.2; p(d|a) = (1.6/3)*0.125 = 0.066667 (sum 1).
    assert _p(tables, [C, A])[[A, B, C, D]] == pytest.approx([0.2, 0.466667, 0.266667, 0.066667], abs=1e-6)
    # After b: follower a (1): p(a|b) = (1 - 0.6)/1 + 0.6*0.375 = 0.625.
    assert _p(tables, [B])[A] == pytest.approx(0.625, abs=1e-6)


def test_trigram_kneser_ney_on_the_same_text():
    # Trigram occurrences aba, bac, aca, cab: all 1 -> n1=4, n2=0, Y = 1, D1 = 1 - 0 = 1 (not below 1:
    #   falls back to 0.5).
    # Bigram continuation counts: ab {c} 1 (its first occurrence opens the text), ba {a} 1, ac {b} 1,
    #   ca {a} 1: again all 1 -> D1 = 0.5. Unigram: as in the bigram test (p1 a .375, b .25, c .25, d .125).
    # p2(.|a): b 1, c 1, total 2, gamma = 0.5*2/2 = 0.5: p2(b|a) = p2(c|a) = 0.5/2 + 0.5*0.25 = 0.375,
    #   p2(a|a) = 0.5*0.375 = 0.1875, p2(d|a) = 0.0625.
    # p3(.|b a): c 1, total 1, gamma = 0.5: p3(c|ba) = 0.5 + 0.5*0.375 = 0.6875, p3(b|ba) = 0.5*0.375 = 0.1875,
    #   p3(a|ba) = 0.5*0.1875 = 0.09375, p3(d|ba) = 0.5*0.0625 = 0.03125.
    tables = kneser_ney.fit(np.array([A, B, A, C, A, B]), V, max_order=3)
    p = _p(tables, [C, B, A])
    assert p[[A, B, C, D]] == pytest.approx([0.09375, 0.1875, 0.6875, 0.03125], abs=1e-6)
    assert p.sum() == pytest.approx(1.0, abs=1e-6)
    # History c a never seen before a token: the trigram passes p2(.|a) through.
    assert _p(tables, [D, A])[[A, B, C, D]] == pytest.approx([0.1875, 0.375, 0.375, 0.0625], abs=1e-6)


def test_a_three_word_text_falls_back_order_by_order():
    # Text a b c, asked for 5-grams: no 4-gram exists, so it is a trigram model.
    # Trigram abc 1: n1=1, n2=0 -> D1 = 1 - 0 = 1, falls back to 0.5; gamma = 0.5.
    # Bigram continuations: ab has no token before it (not in the table), bc {a} 1: D1 falls back to 0.5.
    # Unigram continuations: b 1, c 1 (a none): D1 falls back to 0.5, gamma = 0.5*2/2 = 0.5;
    #   p1(b) = p1(c) = 0.5/2 + 0.5*0.25 = 0.375, p1(a) = p1(d) = 0.125.
    # p2(c|b) = 0.5 + 0.5*0.375 = 0.6875; p3(c|ab) = 0.5 + 0.5*0.6875 = 0.84375.
    tables = kneser_ney.fit(np.array([A, B, C]), V, max_order=5)
    assert int(tables["order"]) == 3
    assert _p(tables, [A, B])[C] == pytest.approx(0.84375, abs=1e-6)
    # After a: no bigram row (ab was never continued), no trigram row: the unigram, no division by zero.
    after_a = _p(tables, [D, A])
    assert after_a[[A, B, C, D]] == pytest.approx([0.125, 0.375, 0.375, 0.125], abs=1e-6)
    assert np.isfinite(after_a).all()
    # Every table that exists holds something; an empty context gets the unigram.
    assert all(len(tables[f"cols_{k}"]) for k in (2, 3))
    assert _p(tables, [])[[A, B, C, D]] == pytest.approx([0.125, 0.375, 0.375, 0.125], abs=1e-6)


def test_discounts_fall_back_when_count_of_counts_are_zero():
    # n1=2, n2=1, n3=1, n4=1: Y = 2/4 = 0.5, D1 = 1 - 2*0.5*1/2 = 0.5, D2 = 2 - 3*0.5*1/1 = 0.5,
    #   D3+ = 3 - 4*0.5*1/1 = 1.0.
    assert kneser_ney.discounts(np.array([1, 1, 2, 3, 4])) == pytest.approx((0.5, 0.5, 1.0))
    assert kneser_ney.discounts(np.array([5, 7])) == kneser_ney.FALLBACK_DISCOUNTS  # no 1s or 2s
    assert kneser_ney.discounts(np.array([], np.int64)) == kneser_ney.FALLBACK_DISCOUNTS


def test_one_word_cannot_be_fitted():
    with pytest.raises(kneser_ney.NotFitted, match="1 distinct token"):
        kneser_ney.fit(np.array([A, A, A, kneser_ney.BREAK, A]), V)
    with pytest.raises(kneser_ney.NotFitted, match="0 distinct tokens"):
        kneser_ney.fit(np.zeros([0], np.int64), V)


def test_the_train_text_is_rebuilt_from_stride_two_windows():
    rng = np.random.RandomState(0)
    # Words of 1 to 5 tokens (a word with punctuation is several), two documents, the second cut in two
    # blocks (a held-out block between them): three sequences.
    documents = [[list(rng.randint(3, 40, size=rng.choice([1, 1, 2, 5]))) for _ in range(n)] for n in (120, 200)]
    first, second = windows(documents[0]), windows(documents[1])
    contexts = np.concatenate([first[0], second[0][:30], second[0][50:]])
    targets = np.concatenate([first[1], second[1][:30], second[1][50:]])
    stream = kneser_ney.rebuild_sequences(contexts, targets)
    sequences = [s for s in np.split(stream, np.flatnonzero(stream == kneser_ney.BREAK) + 1) if len(s)]
    assert len(sequences) == 3 and all(s[-1] == kneser_ney.BREAK for s in sequences)
    text = [[t for word in document for t in word] for document in documents]
    # Each sequence is a contiguous stretch of its document's tokens...
    for sequence, document in zip(sequences, [text[0], text[1], text[1]]):
        body = ",".join(map(str, sequence[:-1]))
        assert body in ",".join(map(str, document))
    # ... and the first one all of it but the head cut off by the first window's 32-token context
    # and the word stride 2 leaves after the last window: far more than one event per window.
    assert len(sequences[0]) - 1 >= len(text[0]) - 32 - 5 * 2
    assert len(sequences[0]) - 1 > 2 * len(first[0])


def test_windows_out_of_order_are_put_back_in_the_order_of_the_text():
    # Transform need not keep the text's order: on a 909k-word folder most windows came out of order, and
    # rebuilding in file order counted each window's whole context (10M tokens instead of 1M).
    rng = np.random.RandomState(1)
    documents = [[list(rng.randint(3, 400, size=rng.choice([1, 1, 2, 5]))) for _ in range(n)] for n in (150, 220)]
    (c1, t1), (c2, t2) = windows(documents[0]), windows(documents[1])
    contexts, targets = np.concatenate([c1, c2]), np.concatenate([t1, t2])
    in_order = kneser_ney.rebuild_sequences(contexts, targets)
    shuffle = rng.permutation(len(contexts))
    stream, owners, _ = kneser_ney.rebuild_with_owners(contexts[shuffle], targets[shuffle])
    assert (stream != kneser_ney.BREAK).sum() == (in_order != kneser_ney.BREAK).sum()
    # The same text, sequence for sequence (their order may differ), each token owned by a window of its own.
    split = lambda x: sorted(tuple(s) for s in np.split(x, np.flatnonzero(x == kneser_ney.BREAK) + 1) if len(s))  # noqa: E731
    assert split(stream) == split(in_order)
    assert set(owners.tolist()) <= set(range(len(contexts)))
    order = kneser_ney.text_order(contexts[shuffle], targets[shuffle])
    assert sorted(order.tolist()) == list(range(len(contexts)))  # a permutation


def test_a_text_repeated_in_several_documents_is_rebuilt_once_per_copy():
    # A license copied into many packages: every window of one copy has twins in the others. Each copy must
    # continue its own chain; linking only the first twin left all copies but one to start anew window by
    # window, each with its whole context (a 1.08M-word folder of Debian documentation rebuilt as 1.8x its text).
    rng = np.random.RandomState(2)
    license_text = [list(rng.randint(3, 400, size=rng.choice([1, 1, 2, 5]))) for _ in range(160)]
    other = [list(rng.randint(3, 400, size=rng.choice([1, 1, 2]))) for _ in range(90)]
    parts = [windows(document) for document in (license_text, license_text, license_text, other)]
    contexts, targets = np.concatenate([c for c, _ in parts]), np.concatenate([t for _, t in parts])
    in_order = sum(int((kneser_ney.rebuild_sequences(c, t) != kneser_ney.BREAK).sum()) for c, t in parts)
    shuffle = rng.permutation(len(contexts))
    stream = kneser_ney.rebuild_sequences(contexts[shuffle], targets[shuffle])
    assert (stream != kneser_ney.BREAK).sum() == in_order
    assert (stream == kneser_ney.BREAK).sum() == 4  # one sequence per document


def test_positions_invert_the_text_order():
    order = np.array([2, 0, 3, 1])
    assert kneser_ney.positions(order).tolist() == [1, 3, 0, 2]


def test_a_reference_that_cannot_be_fitted_is_left_out_of_the_gate_and_named():
    reference = {"unigram_top5": 0.2, "bigram_top5": 0.3, "eval_examples": 100,
                 baselines.KNESER_NEY: {"not_fitted": "the train text holds 1 distinct token: nothing to predict "
                                                      "from counts", "eval_examples": 100}}
    scores, extra = reference_scores(reference)
    assert scores == {"unigram": 0.2, "bigram": 0.3}
    payload = {"references": scores, "gate_reference": "bigram", **extra}
    lines = gate_summary.references_lines(payload, LABEL, 0.5)
    assert lines[1] == ("  Not fitted, left out of the gate: kneser_ney (interpolated modified Kneser-Ney: the train "
                        "text holds 1 distinct token: nothing to predict from counts)")


def test_the_summary_names_kneser_ney_and_the_gate_takes_the_strongest():
    reference = {"unigram_top5": 0.2, "bigram_top5": 0.3, "eval_examples": 100,
                 baselines.KNESER_NEY: {"kneser_ney_top5": 0.4, "kneser_ney_top1": 0.25, "order": 4,
                                        "description": "interpolated modified Kneser-Ney 4-gram at the word starts "
                                                       "of the train text + a cache of the window's words (0.10)",
                                        "train_tokens": 12345, "word_start_events": 3000, "sequences": 2,
                                        "eval_examples": 100}}
    scores, extra = reference_scores(reference)
    assert scores == {"unigram": 0.2, "bigram": 0.3, "kneser_ney": 0.4}
    assert max(scores, key=lambda name: scores[name]) == "kneser_ney"
    lines = gate_summary.references_lines({"references": scores, "gate_reference": "kneser_ney", **extra}, LABEL, 0.5)
    assert "bigram 0.3000 [95% CI " in lines[0] and "kneser_ney 0.4000 [95% CI " in lines[0]
    assert lines[1] == ("  kneser_ney: interpolated modified Kneser-Ney 4-gram at the word starts of the train text + "
                        "a cache of the window's words (0.10) (12,345 tokens, 3,000 word starts; order, counting and "
                        "shares cross-fitted on train)")


def _write(path, contexts: np.ndarray, targets: np.ndarray) -> str:
    """Transformed windows as the Trainer reads them (GZIP TFRecords of int64 features)."""
    from models.seq2seq import features

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))

    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for context, target in zip(contexts, targets):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                features.CONTEXT_XF: ints(context), features.TARGET_XF: ints(target),
                features.NEXT_TOKEN_XF: ints(target[:1])})).SerializeToString())
    return str(path)


def test_the_reference_on_windows_of_a_cycle_and_of_one_word(tmp_path):
    # a b c d repeated: after any history the next word is certain, so every eval window is a top-1 hit.
    cycle = [[A], [B], [C], [D]] * 30
    train = _write(tmp_path / "train.gz", *windows(cycle[:80]))
    evaluation = _write(tmp_path / "eval.gz", *windows(cycle[1:60]))
    result = baselines.kneser_ney_reference(train, [evaluation], V, 32, 8)
    assert (result["kneser_ney_top1"], result["kneser_ney_top5"]) == (1.0, 1.0)
    # 80 words, windows of 16 + 4 every 2 words: all 80 rebuilt, in one sequence.
    assert (result["order"], result["train_tokens"], result["sequences"]) == (5, 80, 1)
    one_word = _write(tmp_path / "one.gz", *windows([[A]] * 60))
    assert baselines.kneser_ney_reference(one_word, evaluation, V, 32, 8)["not_fitted"].startswith(
        "the train text holds 1 distinct token")


def test_the_orders_fitted_together_are_each_order_fitted_alone():
    # fit_orders counts the text once; each model differs only at its top order (occurrences there).
    stream = np.array([A, B, A, C, A, B, kneser_ney.BREAK, C, A, B, D, A, B, A, C])
    together = kneser_ney.fit_orders(stream, V, (2, 3, 4, 9))
    for order in (2, 3, 4, 9):
        alone = kneser_ney.fit(stream, V, order)
        assert sorted(together[order]) == sorted(alone)
        for key, value in alone.items():
            np.testing.assert_array_equal(together[order][key], value, err_msg=f"order {order}, {key}")
    assert int(together[9]["order"]) == 8  # the longer sequence holds 8 tokens: the order falls back to 8


def test_fits_sharing_the_streams_grams_equal_fits_that_count_them_alone():
    # Cross-fitting and fit_chosen fit every position and word starts of one stream from one count_grams:
    # the tables must be those of each fit counting the n-grams itself (including grams of a higher order).
    stream = np.array([A, B, A, C, A, B, kneser_ney.BREAK, C, A, B, D, A, B, A, C, D, A])
    starts = np.array([1, 0, 1, 1, 0, 1, 0, 1, 1, 0, 1, 1, 0, 1, 1, 0, 1], bool)
    grams = kneser_ney.count_grams(stream, V, 6)
    for events in (None, starts):
        alone = kneser_ney.fit_orders(stream, V, (2, 3, 5), events)
        shared = kneser_ney.fit_orders(stream, V, (2, 3, 5), events, grams)
        for order in (2, 3, 5):
            assert sorted(shared[order]) == sorted(alone[order])
            for key, value in alone[order].items():
                np.testing.assert_array_equal(shared[order][key], value, err_msg=f"order {order}, {key}")
    single = kneser_ney.fit(stream, V, 4, starts, grams)
    for key, value in kneser_ney.fit(stream, V, 4, starts).items():
        np.testing.assert_array_equal(single[key], value, err_msg=key)
    # Grams of a lower order than asked for are counted again, not used short.
    assert int(kneser_ney.fit(stream, V, 5, grams=kneser_ney.count_grams(stream, V, 2))["order"]) == 5


def test_the_cross_fitting_scorer_gives_the_served_probabilities_with_one_trace_per_order():
    # Cross-fitting scores many fits of one order (folds x ways of counting) through kneser_ney.scorer, one
    # traced graph; the served model scores with KneserNey's variables. Both must give the same numbers, and
    # a second fit of the order (other table sizes) must not trace again.
    rng = np.random.default_rng(3)
    texts = [rng.integers(A, D + 1, size=n) for n in (40, 90)]
    rows = tf.constant(np.concatenate([rng.integers(A, D + 1, size=(5, 4)), np.zeros((5, 2), np.int64)], axis=1))
    kneser_ney._traced_scorer.cache_clear()
    sizes = set()
    for text in texts:
        tables = kneser_ney.fit(text, V, max_order=4)
        sizes.add(len(tables["cols_4"]))
        np.testing.assert_array_equal(kneser_ney.scorer(tables)(rows).numpy(),
                                      kneser_ney.KneserNey(tables).probabilities(rows).numpy())
    assert len(sizes) == 2  # the two fits' tables differ in size...
    calls = kneser_ney._traced_scorer.cache_info()
    assert (calls.misses, calls.hits) == (1, 1)  # ...and share one graph (its input signature: traced once)

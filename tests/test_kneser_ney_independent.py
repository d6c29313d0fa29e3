"""The project's Kneser-Ney (models/seq2seq/kneser_ney.py) against an independent textbook estimator
(benchmarks/kn_independent.py: Chen and Goodman's interpolated modified Kneser-Ney in plain dictionaries,
no code shared). The estimator is first checked against arithmetic done by hand here; then both must give
the same distribution after every context of random texts, orders 2 to 5, with sequence breaks and the
OOV id counted as an ordinary word (issue 43: an independent Kneser-Ney must not beat the reference by a
difference in the estimator)."""
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from models.seq2seq import kneser_ney

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import kn_independent  # noqa: E402

V = 7
A, B, C, D = 3, 4, 5, 6
OOV = V - 1


def _project(stream: list[int], vocab_size: int, order: int, contexts: list[list[int]],
             events: list[bool] | None = None) -> np.ndarray:
    tables = kneser_ney.fit(np.asarray(stream, np.int64), vocab_size, max_order=order,
                            events=None if events is None else np.asarray(events, bool))
    width = max(len(c) for c in contexts) + 1
    rows = np.array([c + [0] * (width - len(c)) for c in contexts], np.int64)
    return kneser_ney.KneserNey(tables).probabilities(tf.constant(rows)).numpy()


def _texts(stream: list[int]) -> list[list[int]]:
    return kn_independent.sequences(np.asarray(stream))


def test_the_independent_estimator_on_a_hand_made_text():
    # Text a b a c a b (as in tests/test_kneser_ney.py). Bigram occurrences ab 2, ba 1, ac 1, ca 1:
    #   n1=3, n2=1: Y = 0.6, D1 = 1 - 2*0.6/3 = 0.6, D2 = 2 - 0 = 2 (not below 2: half the count, 1.0).
    # Unigram continuations a 2 (b, c before it), b 1, c 1, total 4: n1=2, n2=1, Y = 0.5, D1 = 0.5, D2 -> 1.0;
    #   gamma = (0.5*2 + 1.0)/4 = 0.5.
    #   uniform (over the 4 non-reserved ids): p1 = a 1/4 + 0.125, b = c = 0.5/4 + 0.125, d = 0.125.
    #   leftover (all of gamma to the OOV id, here d): p1 = a 0.25, b 0.125, c 0.125, d 0.5.
    # After a: b (2 - 1.0)/3, c (1 - 0.6)/3, gamma(a) = 1.6/3.
    uniform = kn_independent.KneserNey([[A, B, A, C, A, B]], 2, V, OOV, "uniform")
    assert uniform.distribution([C, A])[[A, B, C, D]] == pytest.approx([0.2, 0.466667, 0.266667, 0.066667], abs=1e-6)
    assert uniform.distribution([D])[[A, B, C, D]] == pytest.approx([0.375, 0.25, 0.25, 0.125])
    leftover = kn_independent.KneserNey([[A, B, A, C, A, B]], 2, V, OOV, "leftover")
    assert leftover.distribution([D])[[A, B, C, D]] == pytest.approx([0.25, 0.125, 0.125, 0.5])
    # p(d | a) = gamma(a) * 0.5 = 0.266667: the unknown word ranks with c after a, where text is new.
    assert leftover.distribution([A])[[A, B, C, D]] == pytest.approx(
        [1.6 / 3 * 0.25, 1 / 3 + 1.6 / 3 * 0.125, 0.4 / 3 + 1.6 / 3 * 0.125, 1.6 / 3 * 0.5], abs=1e-6)
    # With KenLM's sentence starts, a (which opens the text) has one more left neighbour, <s>:
    #   continuations a 3, b 1, c 1, total 5; n1=2, n2=0, n3=1: Y = 1, D1 = 1 - 0 = 1 (not below 1: 0.5),
    #   D3+ = 3 - 4*1*0/1 = 3 (not below 3: 1.5); gamma = (0.5*2 + 1.5)/5 = 0.5; p1(a) = 1.5/5 + 0.125.
    started = kn_independent.KneserNey([[A, B, A, C, A, B]], 2, V, OOV, "uniform", start=True)
    assert started.distribution([D])[A] == pytest.approx(0.425)


def test_the_project_matches_the_independent_estimator_on_a_hand_made_text():
    stream = [A, B, A, C, A, B]
    for order in (2, 3, 5):
        contexts = [[C, A], [D], [B, A], [A, B, A], [], [C, A, B, A]]
        model = kn_independent.KneserNey(_texts(stream), order, V, OOV)
        expected = np.array([model.distribution(c) for c in contexts])
        np.testing.assert_allclose(_project(stream, V, order, contexts), expected, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_project_matches_the_independent_estimator_on_random_texts(seed):
    # Zipf-like tokens over 12 ids (3 reserved, the OOV id last and counted as a word), three sequences;
    # every distribution after 40 contexts taken from the text and 10 random ones, orders 2 to 5.
    rng = np.random.default_rng(seed)
    vocab = 12
    weights = 1.0 / np.arange(1, vocab - 2)
    words = rng.choice(np.arange(3, vocab), size=600, p=weights / weights.sum())
    stream = [*words[:250], kneser_ney.BREAK, *words[250:530], kneser_ney.BREAK, *words[530:]]
    texts = _texts(np.asarray(stream))
    contexts = [list(map(int, words[i - n:i])) for i, n in zip(rng.integers(6, 600, 40), rng.integers(0, 6, 40))]
    contexts += [list(map(int, rng.integers(3, vocab, n))) for n in rng.integers(1, 6, 10)]
    for order in (2, 3, 4, 5):
        model = kn_independent.KneserNey(texts, order, vocab, vocab - 1)
        expected = np.array([model.distribution(c) for c in contexts])
        got = _project(stream, vocab, order, contexts)
        np.testing.assert_allclose(got, expected, atol=2e-6)
        assert got.sum(axis=1) == pytest.approx(np.ones(len(contexts)), abs=1e-5)


@pytest.mark.parametrize("seed", [0, 1])
def test_counted_at_word_starts_the_project_matches_the_independent_estimator(seed):
    """Only the n-grams ending at a word's first token are counted (at every order): the model of the events
    an eval window asks for. Words of one to three tokens, a word's later tokens drawn from other ids."""
    rng = np.random.default_rng(seed)
    vocab = 14
    stream, events = [], []
    for _ in range(400):
        length = int(rng.choice([1, 1, 1, 2, 3]))
        stream += [int(rng.integers(3, 9))] + [int(t) for t in rng.integers(8, vocab, length - 1)]
        events += [True] + [False] * (length - 1)
    cut = len(stream) // 2
    stream.insert(cut, kneser_ney.BREAK)
    events.insert(cut, False)
    texts = _texts(np.asarray(stream))
    flags = kn_independent.split_at(events, lambda index, _: stream[index] < 0)
    assert [len(t) for t in texts] == [len(f) for f in flags]
    contexts = [stream[i - n:i] for i, n in zip(rng.integers(8, cut, 30), rng.integers(0, 6, 30))]
    contexts += [list(map(int, rng.integers(3, vocab, n))) for n in rng.integers(1, 6, 10)]
    for order in (2, 3, 4, 5):
        model = kn_independent.KneserNey(texts, order, vocab, vocab - 1, counted=flags)
        expected = np.array([model.distribution(c) for c in contexts])
        got = _project(stream, vocab, order, contexts, events)
        np.testing.assert_allclose(got, expected, atol=2e-6)
        # A token that never begins a word gets only the uniform floor's share after any context.
        inside = [t for t in range(9, vocab) if t not in {stream[i] for i in range(len(stream)) if events[i]}]
        assert inside and (got[:, inside] < 0.05).all()
        assert got.sum(axis=1) == pytest.approx(np.ones(len(contexts)), abs=1e-5)

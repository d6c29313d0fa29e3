"""The n-gram tables served beside the network, the fit of the mix, and the held-out blocks.

Expected values are counted by hand in the tests (plain Python over the events), never by the
code under test.
"""
import collections

import numpy as np
import pytest
import tensorflow as tf
from support.text_windows import windows

from models.seq2seq import blend, count_reference, features, holdout, kneser_ney, ngram
from pipeline.results import gate_summary

V = 12


def _events(seed=0, n=600):
    """Contexts of random length whose next token depends on the last context token."""
    rng = np.random.RandomState(seed)
    contexts = rng.randint(3, V, size=(n, 5))
    for row, length in zip(contexts, rng.randint(0, 6, size=n)):
        row[length:] = features.PAD_ID
    last = [row[row != 0][-1] if (row != 0).any() else 0 for row in contexts]
    next_ids = np.array([(v * 5 + rng.choice([0, 0, 0, 1, 2])) % (V - 3) + 3 for v in last])
    return contexts, next_ids


def test_events_are_the_last_two_real_context_tokens():
    contexts = np.array([[5, 6, 7, 0], [9, 0, 0, 0], [0, 0, 0, 0]])
    got = ngram.boundary_events(contexts, [3, 4, 8])
    assert got.tolist() == [[6, 7, 3], [0, 9, 4], [0, 0, 8]]


def test_both_distributions_sum_to_one_and_the_bigram_one_ranks_as_the_reference_counts():
    contexts, next_ids = _events()
    tables = ngram.NgramTables(ngram.fit_tables(ngram.boundary_events(contexts, next_ids), V))
    probabilities = tables.probabilities(tf.constant(contexts[:50]))
    for value in probabilities.values():
        np.testing.assert_allclose(value.numpy().sum(axis=1), 1.0, atol=1e-5)
        assert (value.numpy() > 0).all()
    # The reference by hand: followers of the last context token by count.
    followers = collections.defaultdict(collections.Counter)
    for row, w in zip(contexts, next_ids):
        real = row[row != 0]
        followers[real[-1] if len(real) else 0][w] += 1
    bigram = probabilities["bigram"].numpy()
    for row, p in zip(contexts[:50], bigram):
        real = row[row != 0]
        counts = followers[real[-1] if len(real) else 0]
        ranked = sorted(counts, key=lambda w: -counts[w])
        for better, worse in zip(ranked, ranked[1:]):
            if counts[better] > counts[worse]:
                assert p[better] > p[worse]
        assert p[ranked[0]] == p.max()


def test_interpolated_uses_the_trigram_when_seen():
    # After (4, 5) always 9; after (6, 5) always 10: only the trigram tells them apart.
    contexts = np.array([[4, 5, 0]] * 20 + [[6, 5, 0]] * 20)
    next_ids = np.array([9] * 20 + [10] * 20)
    tables = ngram.NgramTables(ngram.fit_tables(ngram.boundary_events(contexts, next_ids), V))
    p = tables.probabilities(tf.constant([[4, 5, 0], [6, 5, 0]]))["interpolated"].numpy()
    assert p[0].argmax() == 9 and p[1].argmax() == 10


def test_the_mix_follows_the_better_component_on_held_out_windows():
    rng = np.random.RandomState(0)
    labels = rng.randint(0, V, size=300)
    perfect = np.full((300, V), 0.01)
    perfect[np.arange(300), labels] = 1.0
    perfect /= perfect.sum(axis=1, keepdims=True)
    noise = rng.dirichlet(np.ones(V), size=300)
    weights, record = blend.fit_weights({"network": perfect, "kneser_ney": noise, "cache": noise}, labels)
    assert weights["network"] >= 0.5 and record["mix"]["top5"] == 1.0
    weights, _ = blend.fit_weights({"network": noise, "kneser_ney": perfect, "cache": noise}, labels)
    assert weights["kneser_ney"] >= 0.5
    assert abs(sum(weights.values()) - 1.0) < 1e-9
    assert blend.fit_weights({}, np.zeros(0))[0] == blend.FALLBACK


def test_held_out_blocks_are_fenced_by_unused_windows():
    for count in (500, 4000, 60_000):
        labels = holdout.labels(count)
        held = np.flatnonzero(labels == holdout.HOLDOUT)
        assert 0.05 * count <= len(held) <= 0.25 * count, count
        fit = np.flatnonzero(labels == holdout.FIT)
        # No fit window within GAP windows of a held-out one.
        distance = np.abs(fit[:, None] - held[None, :]).min(axis=1) if len(fit) * len(held) < 5e7 else None
        if distance is not None:
            assert distance.min() > holdout.GAP, count
    assert (holdout.labels(30) == holdout.FIT).all()  # too short: nothing held out


def test_split_files_writes_each_window_where_its_label_says_in_order(tmp_path):
    """Records across two input files and more than one read batch (holdout._BATCH) land in fit.gz or
    holdout.gz, in file order, as ``labels`` assigns them; gap windows in neither."""
    count = holdout._BATCH + 1500
    records = [f"window-{i}".encode() for i in range(count)]
    for part, chunk in enumerate((records[:3000], records[3000:])):
        with tf.io.TFRecordWriter(str(tmp_path / f"train-{part}.gz"), options="GZIP") as writer:
            for record in chunk:
                writer.write(record)
    fit, held, counts = holdout.split_files(str(tmp_path / "train-*.gz"), str(tmp_path / "split"))
    labels = holdout.labels(count)
    read = [list(tf.data.TFRecordDataset(path, "GZIP").as_numpy_iterator()) for path in (fit, held)]
    assert read[0] == [records[i] for i in np.flatnonzero(labels == holdout.FIT)]
    assert read[1] == [records[i] for i in np.flatnonzero(labels == holdout.HOLDOUT)]
    assert counts == {"fit": len(read[0]), "holdout": len(read[1]), "gap": count - len(read[0]) - len(read[1])}
    assert counts["holdout"] > 0 and counts["gap"] > 0


def _sharp(labels: np.ndarray, size: int = V) -> np.ndarray:
    p = np.full((len(labels), size), 0.01)
    p[np.arange(len(labels)), labels] = 1.0
    return p / p.sum(axis=1, keepdims=True)


def _document(rng, words: int) -> list[list[int]]:
    """Words of one or two tokens, and now and then a phrase that comes back (something for the counts to learn)."""
    phrase = [[7], [8, 9], [10]]
    out: list[list[int]] = []
    while len(out) < words:
        out += phrase if rng.rand() < 0.1 else [list(rng.randint(11, 300, size=rng.choice([1, 1, 2])))]
    return out[:words]


def test_held_out_blocks_are_blocks_of_the_text_when_the_file_is_out_of_order(tmp_path):
    # Transform wrote a 1.08M-word folder's windows out of order (each one's file neighbour 9 windows away in
    # the text): blocks of the file left every held-out window's text neighbours in the fit set.
    rng = np.random.RandomState(3)
    parts = [windows(_document(rng, n)) for n in (1400, 1900)]
    contexts, targets = np.concatenate([c for c, _ in parts]), np.concatenate([t for _, t in parts])
    document = np.repeat([0, 1], [len(c) for c, _ in parts])
    place = np.concatenate([np.arange(len(c)) for c, _ in parts])       # the window's place in its document
    shuffle = rng.permutation(len(contexts))
    with tf.io.TFRecordWriter(str(tmp_path / "train-0.gz"), options="GZIP") as writer:
        for i in shuffle:
            writer.write(str(i).encode())
    order = kneser_ney.text_order(contexts[shuffle], targets[shuffle])
    fit, held, counts = holdout.split_files(str(tmp_path / "train-*.gz"), str(tmp_path / "split"), order)
    fit_ids, held_ids = (np.array([int(r) for r in tf.data.TFRecordDataset(path, "GZIP").as_numpy_iterator()])
                         for path in (fit, held))
    assert counts["holdout"] == len(held_ids) > 0.05 * len(contexts) and counts["fit"] == len(fit_ids)
    for doc in (0, 1):
        f, h = fit_ids[document[fit_ids] == doc], held_ids[document[held_ids] == doc]
        distance = np.abs(place[f][:, None] - place[h][None, :]).min()
        assert distance > holdout.GAP, doc


def test_cross_fitting_leaves_out_folds_of_the_text_not_of_the_file():
    # One document's windows in the text's order and shuffled: the same folds of the text, the same scores.
    # Folds of the file would put each scored window's neighbours (its next words) into its fold's model.
    rng = np.random.RandomState(4)
    contexts, targets = windows(_document(rng, 900))
    vocab = 301
    in_order = count_reference.cross_fit(contexts, targets, vocab, orders=(3, 4))
    shuffle = rng.permutation(len(contexts))
    shuffled = count_reference.cross_fit(contexts[shuffle], targets[shuffle], vocab, orders=(3, 4))
    assert shuffled.record["cross_fitted_windows"] == in_order.record["cross_fitted_windows"] == len(contexts)
    assert shuffled.record["top5"] == pytest.approx(in_order.record["top5"], abs=1e-9)
    assert shuffled.record["kneser_ney_alone"] == pytest.approx(in_order.record["kneser_ney_alone"], abs=1e-9)


def test_the_network_share_is_taken_only_when_it_clearly_beats_the_reference_counts():
    rng = np.random.RandomState(1)
    labels = rng.randint(0, V, 300)
    noise = rng.dirichlet(np.ones(V), size=300)
    shares = {"kneser_ney": 0.7, "cache": 0.2, "unknown": 0.1}
    weights, record = blend.fit_network_share(_sharp(labels), noise, labels, shares)
    assert weights["network"] >= 0.5 and record["mix"]["top5"] == 1.0, weights
    assert weights["cache"] == pytest.approx((1 - weights["network"]) * 0.2)
    assert sum(weights.values()) == pytest.approx(1.0)
    # A network no better than the counts leaves the reference's mix exactly as it was.
    weights, _ = blend.fit_network_share(noise, _sharp(labels), labels, shares)
    assert weights == {"network": 0.0, **shares}
    weights, _ = blend.fit_network_share(noise, noise, labels, shares)
    assert weights == {"network": 0.0, **shares}


def test_generate_draws_from_the_share_of_the_best_log_likelihood_not_of_the_best_top5():
    """50 tokens, 500 windows. In one window of ten the counts rank the label sixth (0.001 against five tokens
    of 0.19) and the network gives it 0.3 (the other 49 tokens 0.7 / 49); in the rest the counts give it 0.5
    and the network 1e-9. Top-5: the first kind are hit from a share of 0.4 (0.3 a + 0.001 (1 - a) passes
    0.7 / 49 a + 0.19 (1 - a)), the second up to 0.9: every window from 0.4 to 0.9, and 0.4 has the best
    log-likelihood of those. The mean log-probability 0.1 log(0.001 + 0.299 a) + 0.9 log(0.5 (1 - a)) peaks
    where 0.0299 (1 - a) = 0.9 (0.001 + 0.299 a), at a = 0.097: 0.1 on the grid of tenths."""
    n, vocab = 500, 50
    labels = np.arange(n) % vocab
    ranked_sixth = np.arange(n) % 10 == 0
    network, counts = np.zeros((n, vocab)), np.zeros((n, vocab))
    for row, label in enumerate(labels):
        others = [token for token in range(vocab) if token != label]
        if ranked_sixth[row]:
            network[row, others], network[row, label] = 0.7 / 49, 0.3
            counts[row, others[:5]], counts[row, others[5:]], counts[row, label] = 0.19, 0.049 / 44, 0.001
        else:
            network[row, others], network[row, label] = (1 - 1e-9) / 49, 1e-9
            counts[row, others], counts[row, label] = 0.5 / 49, 0.5
    shares = {"kneser_ney": 0.9, "cache": 0.05, "unknown": 0.05}
    served, _ = blend.fit_network_share(network, counts, labels, shares)
    drawn, record = blend.fit_generation_share(network, counts, labels, shares)
    assert served["network"] == 0.4 and drawn["network"] == 0.1, (served, drawn)
    assert drawn["kneser_ney"] == pytest.approx(0.9 * 0.9) and sum(drawn.values()) == pytest.approx(1.0)
    expected = 0.1 * np.log(0.1 * 0.3 + 0.9 * 0.001) + 0.9 * np.log(0.1 * 1e-9 + 0.9 * 0.5)
    assert record["log_likelihood"] == pytest.approx(expected)
    assert record["counts_log_likelihood"] == pytest.approx(0.1 * np.log(0.001) + 0.9 * np.log(0.5))
    # A network no likelier than the counts, or too few windows to tell, leaves the counts alone.
    noise = np.random.RandomState(2).dirichlet(np.ones(vocab), size=n)
    assert blend.fit_generation_share(noise, counts, labels, shares)[0]["network"] == 0.0
    assert blend.fit_generation_share(network[:1], counts[:1], labels[:1], shares)[0]["network"] == 0.0
    assert blend.fit_generation_share(network[:0], counts[:0], labels[:0], shares)[0] == {"network": 0.0, **shares}


def test_the_reference_takes_the_order_and_shares_with_the_best_cross_fitted_top5():
    rng = np.random.RandomState(2)
    labels = rng.randint(3, V - 1, 400)
    noise = lambda: rng.dirichlet(np.ones(V), size=400)  # noqa: E731
    choice = count_reference.choose({(3, 0.0): noise(), (4, 0.0): _sharp(labels), (5, 0.0): noise()}, noise(), labels)
    assert (choice.order, choice.cache, choice.unknown, choice.word_starts) == (4, 0.0, 0.0, 0.0), choice
    assert choice.record["kneser_ney_alone"]["4"] == 1.0
    # The cache carries the labels: it gets a share; every order ties, so the lowest is taken.
    kn = noise()
    choice = count_reference.choose({(3, 0.0): kn, (4, 0.0): kn, (5, 0.0): kn}, _sharp(labels), labels)
    assert choice.order == 3 and choice.cache > 0 and choice.shares()["kneser_ney"] == pytest.approx(1 - choice.cache)
    # Next words unknown to the model (the OOV id, the last): the unknown word gets a share.
    oov = np.full(400, V - 1)
    choice = count_reference.choose({(3, 0.0): kn, (4, 0.0): kn, (5, 0.0): kn}, noise(), oov)
    assert choice.unknown > 0 and choice.record["top5"] == 1.0
    # Counted at word starts, the model that knows the labels: word starts alone are chosen, and the record
    # keeps the best of each way of counting; where they tie, every position (the simpler model) is kept.
    choice = count_reference.choose({(4, 0.0): kn, (4, 0.5): noise(), (4, 1.0): _sharp(labels)}, noise(), labels)
    assert choice.word_starts == 1.0 and choice.record["by_word_start_share"]["1"] == 1.0, choice
    assert choice.describe().startswith("interpolated modified Kneser-Ney 4-gram at the word starts of the train")
    # Only some (order, way of counting) pairs given, and no candidate ever ranks the label in its top 5: the
    # choice is still one of those given (a pair scored on no window once won on its log-likelihood of 0).
    blind = noise()
    blind[np.arange(400), labels] = 0.0
    choice = count_reference.choose({(3, 0.0): blind, (4, 0.5): blind}, blind, labels)
    assert (choice.order, choice.word_starts) in {(3, 0.0), (4, 0.5)} and choice.record["top5"] == 0.0, choice
    with pytest.raises(ValueError, match=r"\(3, 0.5\)"):
        count_reference.Tally((3,), (0.0, 0.5)).add({(3, 0.0): blind}, blind, labels)
    choice = count_reference.choose({(4, 0.0): kn, (4, 1.0): kn}, noise(), labels)
    assert choice.word_starts == 0.0


@pytest.mark.parametrize("vocab, sharpness, oov_labels", [(4003, 0.2, 0.05), (4003, 5.0, 0.1), (300, 0.5, 0.3),
                                                         (20, 1.0, 0.3), (8, 0.1, 0.5)])
def test_tally_ranks_each_mix_on_a_shortlist_exactly_as_over_the_whole_vocabulary(monkeypatch, vocab, sharpness,
                                                                                    oov_labels):
    """Tally.add scores each candidate on a shortlist of columns (count_reference._Shortlist); its top-5 and
    log-likelihood sums must be those of mixing and ranking every column, computed here the plain way, on
    peaked and flat rows (flat ones send windows to the whole-vocabulary path), OOV labels, tiny vocabularies."""
    rng = np.random.default_rng(vocab)
    n = 200

    def rows():
        x = rng.gamma(sharpness, size=(n, vocab)).astype(np.float32)
        return (x / x.sum(axis=1, keepdims=True)).astype(np.float32)

    kn = {(3, 0.0): rows(), (3, 1.0): rows(), (5, 0.0): rows(), (5, 1.0): rows()}
    context = rng.integers(len(features.RESERVED_TOKENS), vocab, size=(n, 32))
    counts = np.zeros((n, vocab), np.float32)
    np.add.at(counts, (np.arange(n)[:, None], context), 1.0)
    unigram = rng.gamma(0.3, size=vocab).astype(np.float32)
    cache = ((counts + unigram / unigram.sum()) / (counts.sum(axis=1, keepdims=True) + 1.0)).astype(np.float32)
    labels = np.where(rng.random(n) < 0.5, context[:, 0], rng.integers(len(features.RESERVED_TOKENS), vocab, size=n))
    labels = np.where(rng.random(n) < oov_labels, vocab - features.NUM_OOV_BUCKETS, labels)
    whole_vocabulary = []
    mixed = count_reference.mixed
    monkeypatch.setattr(count_reference, "mixed", lambda *args: whole_vocabulary.append(1) or mixed(*args))
    tally = count_reference.Tally((3, 5), (0.0, 1.0))
    tally.add(kn, cache, labels)
    for i, (order, s, c, u) in enumerate(tally.keys):
        p = (1.0 - c - u) * kn[order, s] + c * cache if c else (1.0 - c - u) * kn[order, s]
        p[:, vocab - features.NUM_OOV_BUCKETS] += u
        label_p = p[np.arange(n), labels]
        assert tally.top5[i] == ((p > label_p[:, None]).sum(axis=1) < 5).sum(), (order, s, c, u)
        assert tally.log_likelihood[i] == np.log(np.maximum(label_p, 1e-12)).sum(), (order, s, c, u)
    if sharpness >= 5.0:  # flat rows: some windows cannot be decided on the shortlist
        assert whole_vocabulary


def test_the_cache_counts_the_windows_own_context_tokens_plus_one_unigram_pseudo_token():
    contexts = np.array([[4, 5, 4, 0], [0, 0, 0, 0]])
    tables = ngram.NgramTables(ngram.fit_tables(ngram.boundary_events(contexts, [6, 7]), V))
    unigram = tables.tables["unigram"].numpy()
    cache = tables.probabilities(tf.constant(contexts))["cache"].numpy()
    # Row 0: tokens 4 (twice) and 5 of 3 real ones, plus one pseudo-token spread as the unigram: / 4.
    expected = unigram / 4
    expected[4] += 2 / 4
    expected[5] += 1 / 4
    np.testing.assert_allclose(cache[0], expected, rtol=1e-5)
    np.testing.assert_allclose(cache[1], unigram, rtol=1e-5)  # an empty context: the unigram alone


def test_the_bigram_distribution_ranks_exactly_as_the_reference_on_real_windows(tmp_path):
    """Ties and the unigram fill included: all weight on it scores what baselines.ngram_baselines scores."""
    from models.seq2seq.baselines import ngram_baselines

    contexts, next_ids = _events(seed=3, n=900)
    next_ids[::4] = 3 + (next_ids[::4] % 2)  # many equal counts: the tie-breaks matter

    def write(path, rows):
        with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
            for context, label in rows:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    features.CONTEXT_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=list(context))),
                    features.NEXT_TOKEN_XF: tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
                })).SerializeToString())

    write(tmp_path / "train.gz", zip(contexts[:600], next_ids[:600]))
    write(tmp_path / "eval.gz", zip(contexts[600:], next_ids[600:]))
    reference = ngram_baselines(str(tmp_path / "train.gz"), str(tmp_path / "eval.gz"))["bigram_top5"]
    tables = ngram.NgramTables(ngram.fit_tables(ngram.boundary_events(contexts[:600], next_ids[:600]), V))
    p = tables.probabilities(tf.constant(contexts[600:]))["bigram"].numpy()
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
    # in_top_k as TFMA counts it (a tie straddling the cut counts as a hit): no ties may remain.
    hits = tf.math.in_top_k(tf.constant(next_ids[600:], tf.int32), tf.constant(p), 5).numpy().mean()
    assert hits == reference
    for row in p:
        assert len(set(np.sort(row)[-6:])) == 6  # the top 5 and the next are all distinct values


def test_the_chance_of_a_new_word_goes_to_the_oov_id_and_unseen_ids_read_as_oov():
    # Next words 3, 3, 4, 5: two of the four events are words seen once (Good-Turing: 2/4 new).
    events = np.array([[0, 6, 3], [0, 6, 3], [0, 7, 4], [0, 8, 5]])
    unigram = ngram.fit_tables(events, V)["unigram"]
    assert unigram[V - 1] == pytest.approx(0.5, abs=1e-3)  # the OOV id is the last one
    assert unigram.sum() == pytest.approx(1.0, abs=1e-5)
    seen = np.zeros(V, bool)
    seen[[3, 4]] = True
    assert ngram.unseen_as_oov(np.array([[3, 5, 0], [4, 0, 0]]), seen).tolist() == [[3, V - 1, 0], [4, 0, 0]]


def test_the_served_counts_are_the_kneser_ney_reference_with_a_cache_and_an_unknown_word():
    """All the weight on ``kneser_ney`` (the mix's fallback) serves exactly the reference's model."""
    from models.seq2seq import kneser_ney

    tables = kneser_ney.fit(np.array([3, 4, 5, 3, 4, 6, 3, 4, 5, kneser_ney.BREAK, 7, 8, 9]), V)
    counts = ngram.ServedCounts(tables)
    contexts = tf.constant([[3, 4, 0, 0], [7, 7, 7, 0], [0, 0, 0, 0]])
    parts = counts.probabilities(contexts)
    assert sorted(parts) == sorted(blend.COMPONENTS[1:])
    for value in parts.values():
        np.testing.assert_allclose(value.numpy().sum(axis=1), 1.0, atol=1e-5)
    assert (parts["unknown"].numpy()[:, V - 1] == 1.0).all()  # the OOV id is the last one
    # The cache of row 1 is token 7 three times plus one pseudo-token of the unigram: 7 gets at least 3/4.
    assert parts["cache"].numpy()[1, 7] >= 0.75
    weights = tf.constant([blend.FALLBACK[name] for name in blend.COMPONENTS], tf.float32)
    served = blend.mix(weights, tf.fill([3, V], 1.0 / V), parts).numpy()
    np.testing.assert_allclose(served, kneser_ney.KneserNey(tables).probabilities(contexts).numpy(), atol=1e-7)
    # After 3 4 the text went on with 5 twice and 6 once.
    assert served[0].argmax() == 5


def test_the_paired_noise_counts_the_eval_windows_where_the_served_model_and_its_counts_disagree(tmp_path):
    """``trainer._disagreements`` (the gate's paired noise, models/common/references.py ``contained_demand``):
    counts trained on tokens 3-8 only rank a label of 30 below six others (a miss), and a network sure of it
    lifts it into the top 5 (a hit) on the 3 windows where it is the label and is uniform elsewhere, which
    leaves the counts' ranking unchanged there. So the two disagree on exactly those 3 windows of 20."""
    from test_kneser_ney import _write

    from models.seq2seq import trainer

    vocab = 40
    stream = np.array([3, 4, 5, 6, 7, 8] * 20, np.int64)
    counts = ngram.ServedCounts(kneser_ney.fit(stream, vocab, 3))
    labels = np.array([30, 30, 30] + [4, 5, 6, 7, 8] * 3 + [3, 4], np.int64)
    contexts = np.tile(np.array([[3, 4, 5, 0]], np.int64), (len(labels), 1))
    targets = np.stack([labels, np.full(len(labels), features.END_ID)], axis=1)
    eval_file = _write(tmp_path / "eval.gz", contexts, targets)

    class Network:
        """Logits sure of token 30 for the first 3 rows of each call, uniform for the rest."""
        ngram = counts
        blend_weights = tf.Variable([0.9, 0.1, 0.0, 0.0])

        def next_token_logits(self, chunk):
            rows = tf.shape(chunk)[0]
            sure = tf.one_hot(tf.fill([rows], 30), vocab) * 50.0
            return tf.where((tf.range(rows) < 3)[:, None], sure, tf.zeros([rows, vocab]))

    tokens = trainer._Tokens(vocab, 4, 2, [])
    found = trainer._disagreements(Network(), [eval_file], tokens, count_reference.Choice(3))
    gain, low, high = found.pop("gain"), found.pop("gain_low"), found.pop("gain_high")
    assert found == {"discordant": 3.0, "windows": 20, "scored": 20}
    # The served model hits 3 windows of 20 the counts miss: a gain of 3/20, and the paired interval of
    # differences 1 (3 times) and 0 (17 times): sample variance (3 * 0.85^2 + 17 * 0.15^2) / 19.
    half = 1.96 * np.sqrt((3 * 0.85 ** 2 + 17 * 0.15 ** 2) / 19 / 20)
    assert gain == pytest.approx(0.15) and (low, high) == pytest.approx((0.15 - half, 0.15 + half))
    lines = gate_summary.references_lines({"references": {"kneser_ney": 0.5}, "gate_reference": "kneser_ney",
                                           "contained": ["kneser_ney"],
                                           "paired": {"kneser_ney": {**found, "gain": gain, "gain_low": low,
                                                                     "gain_high": high}}}, "Top-5", 0.65)
    assert lines[1] == ("  The served model over kneser_ney, which it contains, on 20 of the same eval windows: "
                        "+0.1500 [95% CI -0.0106, +0.3106] (paired)")

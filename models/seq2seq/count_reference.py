"""The strongest classical text model: Kneser-Ney with a cache and an unknown word, chosen by cross-fitting on train.

What a practitioner builds first: interpolated modified Kneser-Ney (models/seq2seq/kneser_ney.py) of order 3,
4 or 5, mixed with a cache of the window's own context words (Kuhn and De Mori 1990) and an "unknown word"
share on the OOV id, ``p = (1 - c - u) p_KN-k + c p_cache + u [w = OOV]``. The Kneser-Ney part is counted
the way the pipeline scores, or not: over every position of the train text, only at word starts (the events
an eval window asks for: a next word's first token, given the tokens before it; mid-word events dilute the
counts that predict them), or the two mixed, ``p_KN-k = (1 - s) p_every + s p_starts`` with ``s`` in
``WORD_START_SHARES``. The order ``k``, ``s`` and the shares ``c``, ``u`` are the ones with the best next-word
top-5 (ties: log-likelihood, then the simpler model) on
train windows scored by a Kneser-Ney model of the rest of the train text (``FOLDS`` contiguous folds of the
text, in the order ``kneser_ney.text_order`` recovers: Transform writes a large corpus's windows out of order,
and a fold of the file would leave each scored window's neighbours in its model; the text of the windows
within ``holdout.GAP`` of a fold is left out of its model too, since a window's target holds its neighbours'
next words). Text new to a fold's model reaches it as OOV, as a word the train split never held reaches the
served model (``ngram.unseen_as_oov``): that is what gives the unknown word its share. Nothing is chosen on
the eval split.

The chosen model, refitted on all the train text, is the text family's gate reference (``kneser_ney`` in
references.json) and the served model's count part (models/seq2seq/ngram.py ``ServedCounts`` with these
shares): the network is mixed on top only where it clearly helps (models/seq2seq/blend.py), so the served
model ranks exactly as the reference wherever it does not.
"""
from __future__ import annotations

import dataclasses
import itertools
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from models.common import references
from models.seq2seq import features, holdout, kneser_ney, ngram

ORDERS = (3, 4, 5)
FOLDS = 5
#: The word-start model's share of the Kneser-Ney part: every position alone, the two mixed, word starts alone.
WORD_START_SHARES = (0.0, 0.5, 1.0)
#: Shares tried: the unknown word's matters in hundredths (it enters the top 5 once it beats the fifth guess).
CACHE_SHARES = tuple(step / 10 for step in range(10))
UNKNOWN_SHARES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
#: Cross-fitted windows scored at most, and ``windows x vocabulary`` scored at most (time: each fold's
#: Kneser-Ney models give every window a distribution over the vocabulary per order and way of counting).
MAX_SCORED_WINDOWS, MAX_CELLS = 20_000, 80_000_000
TOP_K = 5
_CHUNK = 256


@dataclasses.dataclass(frozen=True)
class Choice:
    """The chosen model: Kneser-Ney ``order``, the ``cache`` and ``unknown`` shares, the ``word_starts`` share of
    the Kneser-Ney part (``WORD_START_SHARES``), and how it was chosen."""
    order: int
    cache: float = 0.0
    unknown: float = 0.0
    record: dict[str, Any] = dataclasses.field(default_factory=dict)
    word_starts: float = 0.0

    def shares(self) -> dict[str, float]:
        """The count components' weights (models/seq2seq/blend.py COMPONENTS without the network)."""
        return {"kneser_ney": 1.0 - self.cache - self.unknown, "cache": self.cache, "unknown": self.unknown}

    def counted(self) -> str:
        """Where the Kneser-Ney part counts its events."""
        if self.word_starts >= 1:
            return "at the word starts of the train text"
        if self.word_starts <= 0:
            return "over every position of the train text"
        return f"at word starts ({self.word_starts:.2f}) and over every position of the train text"

    def describe(self) -> str:
        parts = [f"interpolated modified Kneser-Ney {self.order}-gram {self.counted()}"]
        if self.cache:
            parts.append(f"a cache of the window's words ({self.cache:.2f})")
        if self.unknown:
            parts.append(f"an unknown-word share ({self.unknown:.2f})")
        return " + ".join(parts)


def seen_ids(stream: np.ndarray, vocab_size: int) -> np.ndarray:
    """``[vocab_size]`` booleans: the token ids a (rebuilt) train text holds."""
    seen = np.zeros(vocab_size, bool)
    seen[stream[stream != kneser_ney.BREAK]] = True
    seen[features.PAD_ID] = False
    return seen


def mixed(parts: dict[str, np.ndarray], kn: np.ndarray, cache: float, unknown: float) -> np.ndarray:
    """``[n, V]`` probabilities of the count mix, from Kneser-Ney's ``kn`` and the ``parts``' cache."""
    p = (1.0 - cache - unknown) * kn
    if cache:
        p = p + cache * parts["cache"]
    if unknown:
        p[:, p.shape[1] - features.NUM_OOV_BUCKETS] += unknown
    return p


def hits(probabilities: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row, (top-1 hit, top-5 hit) as TFMA counts them: the label is in the top k when fewer than k ids
    score higher (models/seq2seq/metrics.py)."""
    label_p = probabilities[np.arange(len(labels)), labels]
    higher = (probabilities > label_p[:, None]).sum(axis=1)
    return (higher < 1).astype(np.float64), (higher < TOP_K).astype(np.float64)


class Tally:
    """Every candidate (order, word-start share, cache share, unknown share) scored on windows as they come:
    top-5 hits and log-likelihood summed, so the windows scored are not bounded by holding ``[windows,
    vocabulary]`` per component (the cross-fitted top-5 differences between shares are a few thousandths:
    6,000 windows chose no unknown share where 20,000 chose the one the eval split prefers,
    docs/history/benchmarks-log.md)."""

    def __init__(self, orders: tuple[int, ...], word_starts: tuple[float, ...] = (0.0,),
                 parts: set[tuple[int, float]] | None = None):
        """``parts``: the (order, word-start share) pairs to score, when not every pair of the two."""
        self.keys = [(order, s, c, u) for order, s, c, u
                     in itertools.product(sorted(orders), sorted(word_starts), CACHE_SHARES, UNKNOWN_SHARES)
                     if c + u < 1 and (parts is None or (order, s) in parts)]
        self.top5 = np.zeros(len(self.keys))
        self.log_likelihood = np.zeros(len(self.keys))
        self.windows = 0
        self.notes: list[str] = []

    def add(self, kn: dict[tuple[int, float], np.ndarray], cache: np.ndarray, labels: np.ndarray) -> None:
        """``kn``: the Kneser-Ney part's ``[n, V]`` probabilities per (order, word-start share).

        Each candidate is scored on a few columns per window (:class:`_Shortlist`) instead of the whole
        vocabulary: the same sums as :func:`mixed` and :func:`hits` over ``[n, V]``, at a fraction of the time
        (cross-fitting ranks hundreds of candidates per window)."""
        missing = sorted({key[:2] for key in self.keys} - set(kn))
        if missing:  # scored on no window, a candidate would win every tie on log-likelihood (0)
            raise ValueError(f"no Kneser-Ney probabilities for (order, word-start share) {missing}")
        labels = np.asarray(labels, np.int64)
        cache_top = _top_columns(cache)
        shortlists: dict[tuple[int, float], _Shortlist] = {}
        for i, (order, s, c, u) in enumerate(self.keys):
            if (order, s) not in shortlists:
                shortlists[order, s] = _Shortlist(kn[order, s], cache, cache_top, labels)
            top5, label_p = shortlists[order, s].top5_hits(c, u)
            self.top5[i] += top5.sum()
            self.log_likelihood[i] += np.log(np.maximum(label_p, 1e-12)).sum()
        self.windows += len(labels)

    def drop_word_starts(self, why: str) -> None:
        """Leave the word-start candidates out (a fold could not fit them): every position alone."""
        keep = [i for i, key in enumerate(self.keys) if key[1] == 0.0]
        self.keys = [self.keys[i] for i in keep]
        self.top5, self.log_likelihood = self.top5[keep], self.log_likelihood[keep]
        self.notes.append(why)

    def choice(self) -> Choice:
        """The best on top-5, then log-likelihood, then the lower order, all positions, the smaller shares."""
        n = max(self.windows, 1)
        scores = {key: (self.top5[i] / n, self.log_likelihood[i] / n) for i, key in enumerate(self.keys)}
        best = max(scores, key=lambda key: (scores[key], -key[0], -key[1], -key[2], -key[3]))
        orders = sorted({key[0] for key in self.keys})
        record: dict[str, Any] = {
            "cross_fitted_windows": int(self.windows), "top5": scores[best][0], "log_likelihood": scores[best][1],
            "kneser_ney_alone": {str(order): scores[order, 0.0, 0.0, 0.0][0] for order in orders
                                 if (order, 0.0, 0.0, 0.0) in scores},
            # The best of each way of counting (its own order and shares): what the choice was between.
            "by_word_start_share": {f"{s:g}": max(value[0] for key, value in scores.items() if key[1] == s)
                                    for s in sorted({key[1] for key in self.keys})}}
        if self.notes:
            record["notes"] = list(self.notes)
        return Choice(best[0], best[2], best[3], record, word_starts=best[1])


#: Columns per window a candidate is ranked on first: the most likely under the Kneser-Ney part and under the
#: cache, each this many (:class:`_Shortlist`).
SHORTLIST = 16


def _top_columns(p: np.ndarray, m: int = SHORTLIST) -> np.ndarray:
    """``[n, m]`` column ids of each row's ``m`` largest values (any order; all columns when fewer)."""
    m = min(m, p.shape[1])
    return np.argpartition(p, p.shape[1] - m, axis=1)[:, p.shape[1] - m:]


class _Shortlist:
    """One Kneser-Ney part's windows, ready to rank every (cache, unknown) mix on a shortlist of columns.

    A mix ``(1 - c - u) kn + c cache + u [OOV]`` is :func:`mixed`'s, computed the same way (float32, the same
    operations) on each window's label, OOV column and ``SHORTLIST`` largest columns of ``kn`` and of
    ``cache``. Any other column ``j`` is neither OOV nor among those, so ``kn_j`` and ``cache_j`` are at most
    the row's ``SHORTLIST``-th largest of each, and its mixed probability at most their mix ``bound`` (rounding
    is monotone). Where ``bound`` does not beat the label, no column off the list does, and the list's count
    of higher columns is :func:`hits`'; where the list already holds 5 higher, the label is out of the top 5
    either way. Only the other windows are ranked over the whole vocabulary."""

    def __init__(self, kn: np.ndarray, cache: np.ndarray, cache_top: np.ndarray, labels: np.ndarray):
        n, vocab = kn.shape
        self.kn, self.cache, self.labels, self.rows = kn, cache, labels, np.arange(n)
        kn_top = _top_columns(kn)
        oov = vocab - features.NUM_OOV_BUCKETS
        listed = np.zeros(kn.shape, bool)
        listed[self.rows[:, None], kn_top] = True
        again = listed[self.rows[:, None], cache_top]          # a cache column already listed by kn
        columns = np.concatenate([kn_top, cache_top], axis=1)
        # Each column once; the label and OOV get slots of their own (the last two).
        self.repeat = np.concatenate([np.zeros(kn_top.shape, bool), again], axis=1)
        self.repeat |= (columns == oov) | (columns == labels[:, None])
        columns = np.concatenate([columns, np.full([n, 1], oov), labels[:, None]], axis=1)
        self.repeat = np.concatenate([self.repeat, (labels == oov)[:, None], np.zeros([n, 1], bool)], axis=1)
        self.label_is_oov = labels == oov  # its slot gets the unknown share too
        self.kn_listed, self.cache_listed = kn[self.rows[:, None], columns], cache[self.rows[:, None], columns]
        # The SHORTLIST-th largest of each row: every column off the list is at most these.
        self.kn_floor = np.take_along_axis(kn, kn_top, 1).min(axis=1)
        self.cache_floor = np.take_along_axis(cache, cache_top, 1).min(axis=1)

    def top5_hits(self, c: float, u: float) -> tuple[np.ndarray, np.ndarray]:
        """Per window, the top-5 hit of the mix ``(c, u)`` as :func:`hits` counts it, and the label's probability."""
        p = (1.0 - c - u) * self.kn_listed
        bound = (1.0 - c - u) * self.kn_floor
        if c:
            p = p + c * self.cache_listed
            bound = bound + c * self.cache_floor
        if u:
            p[:, -2] += u
            p[self.label_is_oov, -1] += u
        label_p = p[:, -1]
        higher = ((p > label_p[:, None]) & ~self.repeat).sum(axis=1)
        unsure = np.flatnonzero((bound > label_p) & (higher < TOP_K))
        if len(unsure):
            whole = mixed({"cache": self.cache[unsure]}, self.kn[unsure], c, u)
            higher[unsure] = (whole > whole[np.arange(len(unsure)), self.labels[unsure]][:, None]).sum(axis=1)
        return (higher < TOP_K).astype(np.float64), label_p


def choose(kn: dict[tuple[int, float], np.ndarray], cache: np.ndarray, labels: np.ndarray) -> Choice:
    """:class:`Tally`'s choice on one set of windows (``kn`` as :meth:`Tally.add` takes it)."""
    tally = Tally(tuple(sorted({order for order, _ in kn})), tuple(sorted({s for _, s in kn})), parts=set(kn))
    tally.add(kn, cache, labels)
    return tally.choice()


def kneser_ney_parts(every: dict[int, kneser_ney.Scorer], starts: dict[int, kneser_ney.Scorer] | None, chunk: tf.Tensor,
                     shares: tuple[float, ...]) -> dict[tuple[int, float], np.ndarray]:
    """The Kneser-Ney part's probabilities of ``chunk`` per (order, word-start share), from the scorers
    (``kneser_ney.scorer``) of every position and (None: not fitted) of word starts, per order."""
    out: dict[tuple[int, float], np.ndarray] = {}
    for order, score in every.items():
        p_every = score(chunk).numpy()
        p_starts = starts[order](chunk).numpy() if starts is not None else None
        for s in shares:
            if s == 0.0:
                out[order, s] = p_every
            elif p_starts is not None:
                out[order, s] = p_starts if s >= 1.0 else (1.0 - s) * p_every + s * p_starts
    return out


def cross_fit(contexts: np.ndarray, targets: np.ndarray, vocab_size: int, orders: tuple[int, ...] = ORDERS,
              folds: int = FOLDS, text_order: np.ndarray | None = None, starts: np.ndarray | None = None) -> Choice:
    """:func:`choose` on train windows (``contexts``, ``targets`` in file order; ``text_order``: their
    ``kneser_ney.text_order`` when the caller has it) each scored by Kneser-Ney models of the train text
    without its fold: of every position and, given the windows' word-start flags ``starts``
    (``kneser_ney.read_windows_and_starts``), of word starts and of the two mixed. Too few windows to
    cross-fit, or a fold that cannot be fitted: the highest order over every position alone (the record says
    why); a fold whose word starts cannot be fitted leaves the word-start candidates out."""
    fallback = max(orders)
    if len(targets) < folds:
        return Choice(fallback, record={"note": f"{len(targets)} train windows: too few to cross-fit"})
    if text_order is None:
        text_order = kneser_ney.text_order(contexts, targets)
    stream, owners, events = kneser_ney.rebuild_with_owners(contexts, targets, text_order, starts)
    position = kneser_ney.positions(text_order)
    fold_of = position * folds // len(targets)
    limit = max(folds, min(MAX_SCORED_WINDOWS, MAX_CELLS // max(vocab_size, 1)))
    scored = references.subsample(len(targets), limit, seed=1)
    shares = WORD_START_SHARES if events is not None else (0.0,)
    tally = Tally(orders, shares)
    if events is None:
        tally.notes.append("no word-start flags in the transformed windows: every position alone")
    for fold in range(folds):
        inside = position[fold_of == fold]
        left_out = (position >= inside.min() - holdout.GAP) & (position <= inside.max() + holdout.GAP)
        without = np.where(left_out[owners], kneser_ney.BREAK, stream)
        grams = kneser_ney.count_grams(without, vocab_size, max(orders))  # both fits count the same n-grams
        try:
            fitted = kneser_ney.fit_orders(without, vocab_size, orders, grams=grams)
        except kneser_ney.NotFitted as error:
            return Choice(fallback, record={"note": f"fold {fold} cannot be fitted: {error}"})
        at_starts = None
        if len(shares) > 1:
            try:
                at_starts = kneser_ney.fit_orders(without, vocab_size, orders, events, grams)
            except kneser_ney.NotFitted as error:
                tally.drop_word_starts(f"fold {fold}: {error}; every position alone")
                shares = (0.0,)
        seen = seen_ids(without, vocab_size)
        rows = scored[fold_of[scored] == fold]
        fold_contexts = ngram.unseen_as_oov(contexts[rows].astype(np.int64), seen)
        fold_labels = ngram.unseen_as_oov(targets[rows, 0].astype(np.int64), seen)
        every = {order: kneser_ney.scorer(fitted[order]) for order in orders}
        starts_models = ({order: kneser_ney.scorer(at_starts[order]) for order in orders}
                         if at_starts is not None else None)
        unigram = tf.constant(fitted[orders[0]]["unigram"])
        for start in range(0, len(rows), _CHUNK):
            chunk = tf.constant(fold_contexts[start:start + _CHUNK])
            tally.add(kneser_ney_parts(every, starts_models, chunk, shares),
                      _cache(chunk, unigram).numpy(), fold_labels[start:start + _CHUNK])
    return tally.choice()


#: ``ngram.cache`` in one traced graph: cross-fitting calls it per chunk of every fold.
_cache = tf.function(ngram.cache, input_signature=(tf.TensorSpec([None, None], tf.int64),
                                                   tf.TensorSpec([None], tf.float32)))


class CountModel(NamedTuple):
    """The chosen count model's tables, for ``ngram.ServedCounts``: ``tables``, the Kneser-Ney model the part
    rests on (every position, or word starts alone), and ``word_starts`` mixed in with ``word_start_share``
    (None, 0.0 when not mixed)."""
    tables: dict[str, np.ndarray]
    word_starts: dict[str, np.ndarray] | None = None
    word_start_share: float = 0.0

    def served(self) -> ngram.ServedCounts:
        return ngram.ServedCounts(self.tables, self.word_starts, self.word_start_share)


def fit_chosen(stream: np.ndarray, events: np.ndarray | None, vocab_size: int,
               choice: Choice) -> tuple[CountModel, Choice]:
    """The chosen model fitted on ``stream`` (word starts at ``events``), and the choice as fitted: its order
    lowered to what the text holds, every position alone where the word starts cannot be fitted (the record
    says so). Raises ``kneser_ney.NotFitted`` when every position cannot be fitted either."""
    grams = kneser_ney.count_grams(stream, vocab_size, choice.order)  # what both fits below count
    if choice.word_starts > 0:
        try:
            if events is None:
                raise kneser_ney.NotFitted("the transformed windows carry no word-start flags")
            starts = kneser_ney.fit(stream, vocab_size, choice.order, events, grams)
        except kneser_ney.NotFitted as error:
            record = {**choice.record, "notes": [*choice.record.get("notes", []), f"word starts: {error}"]}
            choice = dataclasses.replace(choice, word_starts=0.0, record=record)
        else:
            if choice.word_starts >= 1:
                return CountModel(starts), dataclasses.replace(choice, order=int(starts["order"]))
            every = kneser_ney.fit(stream, vocab_size, choice.order, grams=grams)
            return (CountModel(every, starts, choice.word_starts),
                    dataclasses.replace(choice, order=int(max(every["order"], starts["order"]))))
    every = kneser_ney.fit(stream, vocab_size, choice.order, grams=grams)
    return CountModel(every), dataclasses.replace(choice, order=int(every["order"]))


class HeldOut(NamedTuple):
    """Held-out windows as a count model of the fit text sees them (:func:`held_out_counts`)."""
    contexts: np.ndarray   # [n, C] int64, a token the fit text never held as the OOV id
    labels: np.ndarray     # [n] int64, the same
    counts: np.ndarray     # [n, V] the count mix's probabilities


def held_out_counts(stream: np.ndarray, events: np.ndarray | None, vocab_size: int, choice: Choice,
                    contexts: np.ndarray, targets: np.ndarray, limit: int) -> HeldOut:
    """``choice``'s count model fitted on the fit text ``stream`` alone, and at most ``limit`` of the held-out
    windows ``contexts``/``targets`` (seeded) as it sees them: the network's share of the served mix is chosen
    on these (models/seq2seq/blend.py), and benchmarks/text_learning_curve.py scores a network on the very same.

    The held-out windows reach the counts as the eval split reaches the served model: a token the fit text
    never held becomes the OOV id (``ngram.unseen_as_oov``), as a word the train split never held is out of
    the vocabulary at eval time. A fit text too small for any count model gives no windows."""
    try:
        counts = fit_chosen(stream, events, vocab_size, choice)[0].served()
    except kneser_ney.NotFitted:
        targets = targets[:0]
    keep = references.subsample(len(targets), limit, seed=0)
    seen = seen_ids(stream, vocab_size)
    held = ngram.unseen_as_oov(contexts[keep].astype(np.int64), seen)
    labels = ngram.unseen_as_oov(targets[keep, 0].astype(np.int64), seen)
    probabilities = [np.zeros([0, vocab_size], np.float32)]
    for start in range(0, len(held), 256):
        chunk = tf.constant(held[start:start + 256])
        parts = {name: value.numpy() for name, value in counts.probabilities(chunk).items()}
        probabilities.append(mixed(parts, parts["kneser_ney"], choice.cache, choice.unknown))
    return HeldOut(held, labels, np.concatenate(probabilities))


def eval_hits(counts: ngram.ServedCounts, choice: Choice, contexts: np.ndarray, labels: np.ndarray,
              batch: int = 1024) -> dict[str, np.ndarray]:
    """Per window of ``contexts``/``labels``: ``top1``, ``top5`` of the chosen mix and ``alone_top5`` of its
    Kneser-Ney model alone (batched: an eval split of a large corpus never lies in memory as ``[n, V]``)."""
    out: dict[str, list[np.ndarray]] = {"top1": [np.zeros([0])], "top5": [np.zeros([0])], "alone_top5": [np.zeros([0])]}
    for start in range(0, len(labels), batch):
        label = np.asarray(labels[start:start + batch], np.int64)
        parts = {k: v.numpy() for k, v in counts.probabilities(tf.constant(contexts[start:start + batch])).items()}
        top1, top5 = hits(mixed(parts, parts["kneser_ney"], choice.cache, choice.unknown), label)
        out["top1"].append(top1)
        out["top5"].append(top5)
        out["alone_top5"].append(hits(parts["kneser_ney"], label)[1])
    return {k: np.concatenate(v) for k, v in out.items()}

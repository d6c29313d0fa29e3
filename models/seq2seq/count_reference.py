"""The strongest classical text model: Kneser-Ney with a cache and an unknown word, chosen by cross-fitting on train.

What a practitioner builds first: interpolated modified Kneser-Ney (models/seq2seq/kneser_ney.py) of order 3,
4 or 5, mixed with a cache of the window's own context words (Kuhn and De Mori 1990) and an "unknown word"
share on the OOV id, ``p = (1 - c - u) p_KN-k + c p_cache + u [w = OOV]``. The order ``k`` and the shares
``c``, ``u`` are the ones with the best next-word top-5 (ties: log-likelihood, then the simpler model) on
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
from typing import Any

import numpy as np
import tensorflow as tf

from models.common import references
from models.seq2seq import features, holdout, kneser_ney, ngram

ORDERS = (3, 4, 5)
FOLDS = 5
#: Shares tried: the unknown word's matters in hundredths (it enters the top 5 once it beats the fifth guess).
CACHE_SHARES = tuple(step / 10 for step in range(10))
UNKNOWN_SHARES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)
#: Cross-fitted windows scored at most, and ``windows x vocabulary`` scored at most (time: every candidate mix
#: of :class:`Tally` is ranked over the vocabulary at each window).
MAX_SCORED_WINDOWS, MAX_CELLS = 20_000, 80_000_000
TOP_K = 5
_CHUNK = 256


@dataclasses.dataclass(frozen=True)
class Choice:
    """The chosen model: Kneser-Ney ``order``, the ``cache`` and ``unknown`` shares, and how it was chosen."""
    order: int
    cache: float = 0.0
    unknown: float = 0.0
    record: dict[str, Any] = dataclasses.field(default_factory=dict)

    def shares(self) -> dict[str, float]:
        """The count components' weights (models/seq2seq/blend.py COMPONENTS without the network)."""
        return {"kneser_ney": 1.0 - self.cache - self.unknown, "cache": self.cache, "unknown": self.unknown}

    def describe(self) -> str:
        parts = [f"interpolated modified Kneser-Ney {self.order}-gram"]
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
    """Every candidate (order, cache share, unknown share) scored on windows as they come: top-5 hits and
    log-likelihood summed, so the windows scored are not bounded by holding ``[windows, vocabulary]`` per
    component (the cross-fitted top-5 differences between shares are a few thousandths: 6,000 windows chose
    no unknown share where 20,000 chose the one the eval split prefers, docs/history/benchmarks-log.md)."""

    def __init__(self, orders: tuple[int, ...]):
        self.keys = [(order, c, u) for order, c, u in itertools.product(sorted(orders), CACHE_SHARES, UNKNOWN_SHARES)
                     if c + u < 1]
        self.top5 = np.zeros(len(self.keys))
        self.log_likelihood = np.zeros(len(self.keys))
        self.windows = 0

    def add(self, kn_by_order: dict[int, np.ndarray], cache: np.ndarray, labels: np.ndarray) -> None:
        parts = {"cache": cache}
        for i, (order, c, u) in enumerate(self.keys):
            p = mixed(parts, kn_by_order[order], c, u)
            self.top5[i] += hits(p, labels)[1].sum()
            self.log_likelihood[i] += np.log(np.maximum(p[np.arange(len(labels)), labels], 1e-12)).sum()
        self.windows += len(labels)

    def choice(self) -> Choice:
        """The best on top-5, then log-likelihood, then the lower order and the smaller shares."""
        n = max(self.windows, 1)
        scores = {key: (self.top5[i] / n, self.log_likelihood[i] / n) for i, key in enumerate(self.keys)}
        best = max(scores, key=lambda key: (scores[key], -key[0], -key[1], -key[2]))
        orders = sorted({key[0] for key in self.keys})
        record = {"cross_fitted_windows": int(self.windows), "top5": scores[best][0],
                  "log_likelihood": scores[best][1],
                  "kneser_ney_alone": {str(order): scores[order, 0.0, 0.0][0] for order in orders}}
        return Choice(best[0], best[1], best[2], record)


def choose(kn_by_order: dict[int, np.ndarray], cache: np.ndarray, labels: np.ndarray) -> Choice:
    """:class:`Tally`'s choice on one set of windows."""
    tally = Tally(tuple(kn_by_order))
    tally.add(kn_by_order, cache, labels)
    return tally.choice()


def cross_fit(contexts: np.ndarray, targets: np.ndarray, vocab_size: int, orders: tuple[int, ...] = ORDERS,
              folds: int = FOLDS, text_order: np.ndarray | None = None) -> Choice:
    """:func:`choose` on train windows (``contexts``, ``targets`` in file order; ``text_order``: their
    ``kneser_ney.text_order`` when the caller has it) each scored by a Kneser-Ney model of the train text
    without its fold. Too few windows to cross-fit, or a fold that cannot be fitted: the highest order alone
    (the record says why)."""
    fallback = max(orders)
    if len(targets) < folds:
        return Choice(fallback, record={"note": f"{len(targets)} train windows: too few to cross-fit"})
    if text_order is None:
        text_order = kneser_ney.text_order(contexts, targets)
    stream, owners = kneser_ney.rebuild_with_owners(contexts, targets, text_order)
    position = kneser_ney.positions(text_order)
    fold_of = position * folds // len(targets)
    limit = max(folds, min(MAX_SCORED_WINDOWS, MAX_CELLS // max(vocab_size, 1)))
    scored = references.subsample(len(targets), limit, seed=1)
    tally = Tally(orders)
    for fold in range(folds):
        inside = position[fold_of == fold]
        left_out = (position >= inside.min() - holdout.GAP) & (position <= inside.max() + holdout.GAP)
        without = np.where(left_out[owners], kneser_ney.BREAK, stream)
        try:
            fitted = kneser_ney.fit_orders(without, vocab_size, orders)
        except kneser_ney.NotFitted as error:
            return Choice(fallback, record={"note": f"fold {fold} cannot be fitted: {error}"})
        seen = seen_ids(without, vocab_size)
        rows = scored[fold_of[scored] == fold]
        fold_contexts = ngram.unseen_as_oov(contexts[rows].astype(np.int64), seen)
        fold_labels = ngram.unseen_as_oov(targets[rows, 0].astype(np.int64), seen)
        models = {order: kneser_ney.KneserNey(fitted[order]) for order in orders}
        counts = ngram.ServedCounts(fitted[orders[0]])
        for start in range(0, len(rows), _CHUNK):
            chunk = tf.constant(fold_contexts[start:start + _CHUNK])
            tally.add({order: models[order].probabilities(chunk).numpy() for order in orders},
                      counts.probabilities(chunk)["cache"].numpy(), fold_labels[start:start + _CHUNK])
    return tally.choice()


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

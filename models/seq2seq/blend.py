"""The served next-token distribution: a mix of the network and the corpus's n-gram counts.

``p(w) = a p_network(w) + (1 - a) p_counts(w)``, where ``p_counts = b p_kneser_ney + c p_cache + d p_unknown``
(models/seq2seq/ngram.py ``ServedCounts``) is the gate's reference itself: its Kneser-Ney order and its
cache and unknown-word shares are cross-fitted on every train window (models/seq2seq/count_reference.py).
The network's share ``a`` is chosen by next-token top-5 accuracy (the gate's metric), ties broken by
log-likelihood, on held-out TRAIN windows (models/seq2seq/holdout.py), where the network has not trained
(``fit_network_share``). Nothing is chosen on the eval split, which decides blessing. ``a = 0`` ranks
exactly like the reference (the same model, fitted on the same train text), and ``a`` moves away from 0
only for a gain significant on the held-out windows (one-sided 1%, ``clearly_better``): on a text too
small to tell, the served model is the reference. The gate then asks the served model for no fewer hits than
the reference beyond the paired noise (models/common/references.py ``contained_demand``); at 5% a share won
on five held-out windows of 400 lost four eval windows of four on dpkg's triggers.txt alone, and nothing
was pushed. A mix of distributions is a distribution, so perplexity stays
meaningful. Linear interpolation of language models with weights fitted on held-out data is
standard practice (Jelinek and Mercer 1980); it is what makes the mix safe on a corpus of any size.
"""
from __future__ import annotations

import itertools

import numpy as np
import tensorflow as tf

COMPONENTS = ("network", "kneser_ney", "cache", "unknown")
#: The reference's own ranking: the count component that takes what the others leave.
ANCHOR = "kneser_ney"
GRID_STEPS = 10          # weights in tenths
#: The network's shares tried on top of the count mix (``fit_network_share``, ``fit_generation_share``).
NETWORK_SHARES = tuple(step / GRID_STEPS for step in range(GRID_STEPS + 1))
TOP_K = 5
#: Held-out windows the fit is scored on at most (seeded subsample beyond).
MAX_FIT_WINDOWS = 3000
#: Standard errors a gain over the reference's ranking must exceed to be kept (one-sided 1%).
SIGNIFICANCE_Z = 2.326
#: The mix used when nothing is held out (a corpus too short): the count table alone.
FALLBACK = {"network": 0.0, "kneser_ney": 1.0, "cache": 0.0, "unknown": 0.0}


def grid(parts: int = 3) -> list[tuple[float, ...]]:
    """Every ``parts``-tuple of weights in tenths that sums to 1 (the last takes what is left)."""
    return [tuple(step / GRID_STEPS for step in (*head, GRID_STEPS - sum(head)))
            for head in itertools.product(range(GRID_STEPS + 1), repeat=parts - 1) if sum(head) <= GRID_STEPS]


def hits(probabilities: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """1.0 where the label is among the ``TOP_K`` most probable tokens of its row, else 0.0."""
    top = np.argpartition(-probabilities, TOP_K - 1, axis=1)[:, :TOP_K]
    return (top == labels[:, None]).any(axis=1).astype(np.float64)


def score(probabilities: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """(top-5 accuracy, mean log-probability of the label) of ``[n, V]`` probabilities."""
    label_p = probabilities[np.arange(len(labels)), labels]
    return float(hits(probabilities, labels).mean()), float(np.log(np.maximum(label_p, 1e-12)).mean())


def clearly_better(candidate: np.ndarray, reference: np.ndarray, labels: np.ndarray) -> bool:
    """The candidate's top-5 beats the reference's on the same windows by more than ``SIGNIFICANCE_Z``
    standard errors of the paired difference (sqrt(windows where they disagree) / n, McNemar's): a
    gain the noise does not explain (one-sided, 5%)."""
    difference = hits(candidate, labels) - hits(reference, labels)
    return bool(difference.mean() > SIGNIFICANCE_Z * np.sqrt(np.abs(difference).sum()) / len(labels))


def fit_weights(components: dict[str, np.ndarray], labels: np.ndarray) -> tuple[dict[str, float], dict]:
    """The best grid point for ``components`` (name -> ``[n, V]``) on ``labels``, and a record.

    The record holds each component's own (top-5, log-likelihood) and the chosen mix's; a
    component of ``COMPONENTS`` not given gets weight 0.
    """
    labels = np.asarray(labels, np.int64).reshape(-1)
    if not len(labels):
        return dict(FALLBACK), {"held_out_windows": 0, "note": "nothing held out: the count table alone"}
    names = [name for name in COMPONENTS if name in components]
    stacked = [np.asarray(components[name], np.float32) for name in names]
    best, best_weights = (-1.0, -np.inf), grid(len(names))[-1]
    for weights in grid(len(names)):
        mixed = np.zeros_like(stacked[0])
        for weight, part in zip(weights, stacked):
            mixed += weight * part if weight else 0.0
        value = score(mixed, labels)
        if value > best:
            best, best_weights = value, weights
    record = {"held_out_windows": int(len(labels)),
              "components": {name: dict(zip(("top5", "log_likelihood"), score(p, labels)))
                             for name, p in zip(COMPONENTS, stacked)},
              "mix": dict(zip(("top5", "log_likelihood"), best))}
    return dict(zip(COMPONENTS, best_weights)), record


def fit_network_share(network: np.ndarray, counts: np.ndarray, labels: np.ndarray,
                      count_shares: dict[str, float]) -> tuple[dict[str, float], dict]:
    """The network's share ``a`` on held-out train windows, against the fixed count mix ``counts`` (the
    reference's model, models/seq2seq/count_reference.py, with ``count_shares``); the weights of
    ``COMPONENTS``: ``a`` for the network, ``(1 - a)`` times each count share for the rest. ``a`` stays 0
    unless the mix is clearly better than the counts alone on these windows (``clearly_better``)."""
    labels = np.asarray(labels, np.int64).reshape(-1)
    if not len(labels):
        return {**count_shares, "network": 0.0}, {"held_out_windows": 0, "note": "nothing held out: the counts alone"}
    weight = max(NETWORK_SHARES, key=lambda a: (score(a * network + (1 - a) * counts, labels), -a))
    if weight and not clearly_better(weight * network + (1 - weight) * counts, counts, labels):
        weight = 0.0
    record = {"held_out_windows": int(len(labels)),
              "components": {"network": dict(zip(("top5", "log_likelihood"), score(network, labels))),
                             "counts": dict(zip(("top5", "log_likelihood"), score(counts, labels)))},
              "mix": dict(zip(("top5", "log_likelihood"), score(weight * network + (1 - weight) * counts, labels)))}
    return with_network_share(weight, count_shares), record


def with_network_share(share: float, count_shares: dict[str, float]) -> dict[str, float]:
    """The weights of ``COMPONENTS``: ``share`` for the network, ``(1 - share)`` times each count share."""
    return {"network": float(share),
            **{name: float((1 - share) * count_shares.get(name, 0.0)) for name in COMPONENTS[1:]}}


def fit_generation_share(network: np.ndarray, counts: np.ndarray, labels: np.ndarray,
                         count_shares: dict[str, float]) -> tuple[dict[str, float], dict]:
    """The mix ``generate`` draws from: the network's share ``a`` with the highest mean log-probability of
    the label on the same held-out windows (ties: the smaller share), against the same count mix; ``a``
    stays 0 unless that beats the counts alone clearly (``clearly_likelier``). Why a second mix: the served
    one is chosen for top-5, the gate's metric, which asks only that the next word be among five; text is
    drawn from the whole distribution, and log-likelihood is what judges a distribution. At a million words
    the top-5 share (0.5) gave samples no more plausible than the counts alone, the log-likelihood's (0.3)
    clearly more (docs/history/benchmarks-log.md, "Progress the held-out part can resolve")."""
    labels = np.asarray(labels, np.int64).reshape(-1)
    if not len(labels):
        return (with_network_share(0.0, count_shares),
                {"held_out_windows": 0, "note": "nothing held out: the counts alone"})
    rows = np.arange(len(labels))
    network_p, counts_p = network[rows, labels].astype(np.float64), counts[rows, labels].astype(np.float64)
    log_p = {a: np.log(np.maximum(a * network_p + (1 - a) * counts_p, 1e-12)) for a in NETWORK_SHARES}
    share = max(NETWORK_SHARES, key=lambda a: (float(log_p[a].mean()), -a))
    if share and not clearly_likelier(log_p[share], log_p[0.0]):
        share = 0.0
    record = {"held_out_windows": int(len(labels)), "network": share,
              "log_likelihood": float(log_p[share].mean()), "counts_log_likelihood": float(log_p[0.0].mean())}
    return with_network_share(share, count_shares), record


def clearly_likelier(candidate: np.ndarray, reference: np.ndarray) -> bool:
    """The mean of the paired per-window log-probability gains exceeds ``SIGNIFICANCE_Z`` standard errors."""
    difference = np.asarray(candidate, np.float64) - np.asarray(reference, np.float64)
    if len(difference) < 2:
        return False
    return bool(difference.mean() > SIGNIFICANCE_Z * difference.std(ddof=1) / np.sqrt(len(difference)))


def mix(weights: tf.Tensor, network: tf.Tensor, ngram: dict[str, tf.Tensor]) -> tf.Tensor:
    """``[batch, V]`` served probabilities from the network's and the tables' (TF, for the export)."""
    mixed = weights[0] * network
    for index, name in enumerate(COMPONENTS[1:], start=1):
        mixed += weights[index] * ngram[name]
    return mixed

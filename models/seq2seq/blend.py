"""The served next-token distribution: a mix of the network and the corpus's n-gram counts.

``p(w) = a p_network(w) + b p_kneser_ney(w) + c p_cache(w) + d p_unknown(w)``
(models/seq2seq/ngram.py ``ServedCounts``), chosen by next-token top-5 accuracy (the gate's metric),
ties broken by log-likelihood (``fit_shares``): first the counts' own mix (cache and unknown shares,
Kneser-Ney the rest) on every train window, scored by a Kneser-Ney model fitted without it
(cross-fitting: thousands of windows, not the held-out block's hundreds), then the network's share on
held-out TRAIN windows (models/seq2seq/holdout.py), where the network has not trained. Nothing is
chosen on the eval split, which decides blessing. ``b = 1`` ranks exactly like the Kneser-Ney
reference (the same model, fitted on the same train text), and each step moves away from it only for
a gain significant on its windows (one-sided 5%, ``clearly_better``): on a text too small to tell,
the served model is the reference. A mix of distributions is a distribution, so perplexity stays
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
#: The counts' other components, mixed in step 1 of ``fit_shares``, and the shares tried for each: the
#: unknown word's share matters in hundredths (it enters the top 5 once it beats the fifth guess).
COUNT_COMPONENTS = ("cache", "unknown")
COUNT_SHARES = {"cache": tuple(step / 10 for step in range(10)), "unknown": (0.0, 0.01, 0.02, 0.05, 0.1, 0.2)}
GRID_STEPS = 10          # weights in tenths
TOP_K = 5
#: Held-out windows the fit is scored on at most (seeded subsample beyond).
MAX_FIT_WINDOWS = 3000
#: Standard errors a gain over the reference's ranking must exceed to be kept (one-sided 5%).
SIGNIFICANCE_Z = 1.645
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


def fit_shares(ngram_parts: dict[str, np.ndarray], ngram_labels: np.ndarray, network: np.ndarray,
               ngram_on_holdout: dict[str, np.ndarray], holdout_labels: np.ndarray) -> tuple[dict[str, float], dict]:
    """The mix in two steps, each on as many windows as can tell it: less noise than one grid on the held-out block.

    1. The counts' own mix (cache and unknown shares, Kneser-Ney the rest) on ``ngram_parts``: every
       train window scored by tables fitted without it (cross-fitting; a count table has no other memory of
       a window, and the cache reads only the window's own context).
    2. The network's share on the held-out block, against that fixed count mix.
    """
    ngram_labels = np.asarray(ngram_labels, np.int64).reshape(-1)
    holdout_labels = np.asarray(holdout_labels, np.int64).reshape(-1)
    if not len(holdout_labels) or not len(ngram_labels):
        return fit_weights({}, np.zeros(0))
    shares = [step / GRID_STEPS for step in range(GRID_STEPS + 1)]
    anchor = ngram_parts[ANCHOR]

    def counts_mix(parts: dict[str, np.ndarray], mix_shares: tuple[float, ...]) -> np.ndarray:
        mixed = (1 - sum(mix_shares)) * parts[ANCHOR]
        for name, share in zip(COUNT_COMPONENTS, mix_shares):
            mixed = mixed + share * parts[name] if share else mixed
        return mixed

    # Each step leaves the reference's ranking only for a gain beyond the noise of its windows.
    candidates = [point for point in itertools.product(*(COUNT_SHARES[name] for name in COUNT_COMPONENTS))
                  if sum(point) < 1]
    count_shares = max(candidates, key=lambda point: (score(counts_mix(ngram_parts, point), ngram_labels),
                                                      -sum(point)))
    if sum(count_shares) and not clearly_better(counts_mix(ngram_parts, count_shares), anchor, ngram_labels):
        count_shares = (0.0,) * len(COUNT_COMPONENTS)
    counts = counts_mix(ngram_on_holdout, count_shares)
    weight = max(shares, key=lambda a: (score(a * network + (1 - a) * counts, holdout_labels), -a))
    if weight and not clearly_better(weight * network + (1 - weight) * counts, counts, holdout_labels):
        weight = 0.0
    weights = {"network": weight, ANCHOR: (1 - weight) * (1 - sum(count_shares)),
               **{name: (1 - weight) * share for name, share in zip(COUNT_COMPONENTS, count_shares)}}
    chosen = weight * network + (1 - weight) * counts
    record = {"held_out_windows": int(len(holdout_labels)), "cross_fitted_windows": int(len(ngram_labels)),
              "components": {"network": dict(zip(("top5", "log_likelihood"), score(network, holdout_labels))),
                             **{name: dict(zip(("top5", "log_likelihood"), score(part, ngram_labels)))
                                for name, part in ngram_parts.items()}},
              "counts_mix_cross_fitted": dict(zip(("top5", "log_likelihood"),
                                                  score(counts_mix(ngram_parts, count_shares), ngram_labels))),
              "mix": dict(zip(("top5", "log_likelihood"), score(chosen, holdout_labels)))}
    return {name: weights[name] for name in COMPONENTS}, record


def mix(weights: tf.Tensor, network: tf.Tensor, ngram: dict[str, tf.Tensor]) -> tf.Tensor:
    """``[batch, V]`` served probabilities from the network's and the tables' (TF, for the export)."""
    mixed = weights[0] * network
    for index, name in enumerate(COMPONENTS[1:], start=1):
        mixed += weights[index] * ngram[name]
    return mixed

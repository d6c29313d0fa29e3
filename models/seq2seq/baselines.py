"""Count-based reference points for next-token top-5 accuracy, on the model's own tokens.

They read the TRANSFORMED examples, so tokenization, vocabulary and OOV id are exactly the
model's: a model that does not beat them has learned nothing a frequency table would not.

- unigram: always guess the 5 most frequent next tokens of the train windows;
- bigram: guess the 5 most frequent next tokens that followed the window's last context
  token in train (a window boundary always falls between two words, so the counts are
  taken at the same kind of boundary), backing off to the unigram guess for a last token
  never seen in train.
- kneser_ney: interpolated modified Kneser-Ney of order 3, 4 or 5, counted at the word starts or
  every position of the train text rebuilt from its windows, or both mixed (models/seq2seq/kneser_ney.py),
  with a cache of the window's words and an unknown-word share, all cross-fitted on train
  (models/seq2seq/count_reference.py): the model a practitioner would build first, and the
  strongest of the three (the gate's reference).

Ties are broken by the smaller token id, so results are deterministic (Kneser-Ney's as TFMA
counts the served model's: the label is in the top 5 when fewer than 5 ids score higher).
"""
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from data.tfrecords import list_files
from models.seq2seq import count_reference, features, kneser_ney, ngram

TOP_K = 5
Patterns = str | Sequence[str]  # a glob, or a list of them (TFX fn_args files)
_BATCH = 8192


def ngram_baselines(train_pattern: Patterns, eval_pattern: Patterns) -> dict[str, float]:
    """``{"unigram_top5", "bigram_top5", "eval_examples"}`` for TFRecord globs (GZIP if .gz).

    A pattern may be a list of globs, as TFX's ``fn_args.train_files``. Counted with numpy on
    batch-parsed windows: a Python loop over each parsed ``tf.train.Example`` was the Trainer's
    largest fixed cost on a large corpus (docs/history/benchmarks-log.md, "The whole pipeline on 10M words").
    """
    train_last, train_next = _pairs(train_pattern)
    eval_last, eval_next = _pairs(eval_pattern)
    total = len(eval_next)
    if not total:
        return {"unigram_top5": 0.0, "bigram_top5": 0.0, "eval_examples": 0}
    width = int(max(train_last.max(initial=0), train_next.max(initial=0), eval_last.max(initial=0),
                    eval_next.max(initial=0))) + 1
    unigram_guess = _top(train_next)
    pairs, counts = np.unique(train_last * width + train_next, return_counts=True)
    lasts, nexts = pairs // width, pairs % width
    order = np.lexsort((nexts, -counts, lasts))   # per last token: most frequent first, ties by smaller id
    lasts, nexts = lasts[order], nexts[order]
    starts = np.flatnonzero(np.r_[True, lasts[1:] != lasts[:-1]])
    guess_keys: list[int] = []
    for begin, end in zip(starts, np.r_[starts[1:], len(lasts)]):
        best = [int(t) for t in nexts[begin:min(end, begin + TOP_K)]]
        best += [t for t in unigram_guess if t not in best][:TOP_K - len(best)]
        guess_keys.extend(int(lasts[begin]) * width + t for t in best)
    seen_last = np.isin(eval_last, lasts[starts])
    unigram_hit = np.isin(eval_next, unigram_guess)
    bigram_hit = np.where(seen_last, np.isin(eval_last * width + eval_next, guess_keys), unigram_hit)
    return {
        "unigram_top5": float(unigram_hit.mean()),
        "bigram_top5": float(bigram_hit.mean()),
        "eval_examples": total,
    }


#: What the summary says the Kneser-Ney reference is.
KNESER_NEY = "kneser_ney"


def kneser_ney_reference(train_pattern: Patterns, eval_pattern: Patterns, vocab_size: int, context_tokens: int,
                         target_tokens: int, orders: tuple[int, ...] = count_reference.ORDERS) -> dict[str, Any]:
    """The Kneser-Ney reference on the eval windows: ``{"kneser_ney_top5", "kneser_ney_top1",
    "kneser_ney_alone_top5", "eval_examples", "order", "cache_share", "unknown_share", "description",
    "train_tokens", "sequences", "cross_fitting"}``, or ``{"not_fitted": why, "eval_examples"}`` when the
    train text cannot give the model (fewer than two distinct tokens).

    Its order, counting (word starts, every position, both) and shares are cross-fitted on the train windows
    (``count_reference.cross_fit``), then it is fitted on the train text (``kneser_ney.rebuild_with_owners``)
    and scored at each eval window's boundary on its own context, as the unigram and bigram references are.
    """
    return fit_kneser_ney_reference(train_pattern, eval_pattern, vocab_size, context_tokens, target_tokens,
                                    orders).scores


class KneserNeyFit(NamedTuple):
    """``kneser_ney_reference``'s scores; the fitted count model and the choice (None when not fitted): the
    served model's count part is the same model; and the train windows' ``kneser_ney.text_order`` (the
    Trainer's held-out blocks are blocks of the text, models/seq2seq/holdout.py)."""
    scores: dict[str, Any]
    counts: count_reference.CountModel | None
    choice: count_reference.Choice | None
    text_order: np.ndarray


def fit_kneser_ney_reference(train_pattern: Patterns, eval_pattern: Patterns, vocab_size: int,
                             context_tokens: int, target_tokens: int, orders: tuple[int, ...] = count_reference.ORDERS
                             ) -> KneserNeyFit:
    """The Kneser-Ney reference, fitted and scored (:class:`KneserNeyFit`)."""
    contexts, targets, starts = kneser_ney.read_windows_and_starts(train_pattern, context_tokens, target_tokens)
    order = kneser_ney.text_order(contexts, targets)
    stream, _, events = kneser_ney.rebuild_with_owners(contexts, targets, order, starts)
    choice = count_reference.cross_fit(contexts, targets, vocab_size, orders, text_order=order, starts=starts)
    del contexts, targets, starts
    eval_contexts, eval_targets = kneser_ney.read_windows(eval_pattern, context_tokens, target_tokens)
    try:
        counts, choice = count_reference.fit_chosen(stream, events, vocab_size, choice)
    except kneser_ney.NotFitted as error:
        return KneserNeyFit({"not_fitted": str(error), "eval_examples": int(len(eval_targets))}, None, None, order)
    labels = eval_targets[:, 0] if len(eval_targets) else np.zeros([0], np.int64)
    scored = count_reference.eval_hits(counts.served(), choice, eval_contexts, labels)
    mean = {k: float(v.mean()) if len(labels) else 0.0 for k, v in scored.items()}
    scores = {"kneser_ney_top5": mean["top5"], "kneser_ney_top1": mean["top1"],
              "kneser_ney_alone_top5": mean["alone_top5"], "eval_examples": int(len(labels)),
              "order": choice.order, "cache_share": choice.cache, "unknown_share": choice.unknown,
              "word_start_share": choice.word_starts, "description": choice.describe(),
              "cross_fitting": choice.record, "train_tokens": int((stream != kneser_ney.BREAK).sum()),
              "word_start_events": None if events is None else int(events.sum()),
              "sequences": int((stream == kneser_ney.BREAK).sum())}
    return KneserNeyFit(scores, counts, choice, order)


def kneser_ney_hits(model: kneser_ney.KneserNey, contexts: np.ndarray, labels: np.ndarray,
                    batch: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Per window, (top-1 hit, top-5 hit) of ``model`` as TFMA counts them (models/seq2seq/metrics.py)."""
    top1, top5 = [np.zeros([0])], [np.zeros([0])]
    for start in range(0, len(labels), batch):
        p = model.probabilities(tf.constant(contexts[start:start + batch])).numpy()
        one, five = count_reference.hits(p, np.asarray(labels[start:start + batch], np.int64))
        top1.append(one)
        top5.append(five)
    return np.concatenate(top1), np.concatenate(top5)


def _pairs(patterns: Patterns) -> tuple[np.ndarray, np.ndarray]:
    """(last non-pad context id, next token id) of every transformed example, as two int64 arrays."""
    spec = {features.CONTEXT_XF: tf.io.VarLenFeature(tf.int64),
            features.NEXT_TOKEN_XF: tf.io.FixedLenFeature([], tf.int64)}
    lasts, nexts = [np.zeros([0], np.int64)], [np.zeros([0], np.int64)]
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        for path in list_files(pattern):
            compression = "GZIP" if path.lower().endswith(".gz") else ""
            for batch in tf.data.TFRecordDataset(path, compression_type=compression).batch(_BATCH):
                parsed = tf.io.parse_example(batch, spec)
                context = tf.sparse.to_dense(parsed[features.CONTEXT_XF], features.PAD_ID).numpy()
                # One more PAD column: a batch of empty contexts still has a (PAD) last id.
                padded = np.pad(context, [(0, 0), (0, 1)])
                events = ngram.boundary_events(padded, parsed[features.NEXT_TOKEN_XF].numpy())
                lasts.append(events[:, 1])
                nexts.append(events[:, 2])
    return np.concatenate(lasts), np.concatenate(nexts)


def _top(next_ids: np.ndarray) -> list[int]:
    """The TOP_K most frequent ids (ties by the smaller id); fewer when fewer were seen."""
    counts = np.bincount(next_ids) if len(next_ids) else np.zeros([0], np.int64)
    seen = np.flatnonzero(counts)
    return [int(t) for t in seen[np.lexsort((seen, -counts[seen]))][:TOP_K]]

"""Interpolated modified Kneser-Ney n-grams of the train text, at every position or word starts (Chen, Goodman 1999).

The text family's strongest classical reference, and the count component of the served model
(models/seq2seq/blend.py): one fit (numpy, :func:`fit`), one scorer (TF ops, :class:`KneserNey`), so
the reference and the served component are the same model.

**The text.** The Trainer sees transformed windows, not documents: a window's context (its last
``context_tokens`` token ids, right-padded) and target (the next ids, then END). Windows start every
``stride`` words (data/text.py), so counting each window's boundary sees one event in two of the text.
:func:`rebuild_sequences` puts the train text back together: window ``i + 1``'s context is window
``i``'s shifted by the tokens of ``stride`` words, which also begin window ``i``'s target. Where no
shift fits (a new document, a block held out, a window dropped), a new sequence starts; n-grams never
cross one. The ids are the project's own: its tokenization, vocabulary and OOV id (a word outside the
vocabulary is the OOV token, as the unigram and bigram references count it).

**The model**, for a history ``h`` of ``k - 1`` tokens and its suffix ``h'`` one shorter::

    p_k(w | h) = max(c_k(hw) - D_k(c_k(hw)), 0) / c_k(h.) + gamma_k(h) p_{k-1}(w | h')
    gamma_k(h) = (D_k1 N1(h.) + D_k2 N2(h.) + D_k3 N3+(h.)) / c_k(h.)

``c_N`` counts occurrences at the highest order; a lower order counts continuations, the distinct
tokens seen before an n-gram (``c_k(hw) = N1+(. hw)``). A history never seen at an order passes the
lower order through (``p_k = p_{k-1}``). The unigram level interpolates with the uniform distribution
over the non-reserved ids. Discounts per order from the count-of-counts ``n1..n4`` of its counts:
``Y = n1 / (n1 + 2 n2)``, ``D1 = 1 - 2Y n2/n1``, ``D2 = 2 - 3Y n3/n2``, ``D3+ = 3 - 4Y n4/n3``; one the
formula cannot give (a zero count-of-counts, or a value outside ``(0, c)``) is ``FALLBACK_DISCOUNTS``.

**Bad input.** A text too short for an order keeps the orders it has (a 3-word text is a trigram at
most); a text with fewer than two distinct tokens cannot be fitted (:func:`fit` says why, the reference
is named in the summary and left out of the gate).
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from models.seq2seq import features

MAX_ORDER = 5
#: Discounts for counts 1, 2 and 3+ when the count-of-counts cannot give them (half the count).
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)
#: Break between two sequences in a flat token stream.
BREAK = -1
#: The widest shift (tokens) looked for between two consecutive windows.
MAX_SHIFT = 16
#: Tokens two windows must share to be linked out of file order (text_order).
MIN_OVERLAP = 8
#: Windows of one hash tried per head (text_order, ``_link_by_key``).
LINK_ROUNDS = 8
_CHUNK = 65536
#: ``context_ids -> [batch, V]`` next-token probabilities (:func:`scorer`).
Scorer = Callable[[tf.Tensor], tf.Tensor]


class NotFitted(ValueError):
    """The text cannot give a Kneser-Ney model (the message says why)."""


# ----------------------------------------------------------------------------- the train text


def _real(ids: np.ndarray, stop: tuple[int, ...]) -> np.ndarray:
    """Per row, how many leading ids come before the first of ``stop``."""
    hit = np.isin(ids, stop)
    return np.where(hit.any(axis=1), hit.argmax(axis=1), ids.shape[1])


def window_shifts(contexts: np.ndarray, targets: np.ndarray, max_shift: int = MAX_SHIFT) -> np.ndarray:
    """For each window after the first, the tokens it moved by since the previous window (0: no shift fits).

    ``contexts`` ``[n, Lc]`` right-padded ids, ``targets`` ``[n, Lt]`` (ids, END, PAD). A shift ``s`` fits
    when the new context minus its last ``s`` tokens ends the previous context, and its last ``s`` tokens
    begin the previous target (as far as the target holds). The smallest that fits is taken.
    """
    n = len(contexts)
    shifts = np.zeros(max(n - 1, 0), np.int64)
    context_len = _real(contexts, (features.PAD_ID,))
    target_len = _real(targets, (features.PAD_ID, features.END_ID))
    width, target_width = contexts.shape[1], targets.shape[1]
    for begin in range(0, n - 1, _CHUNK):
        end = min(n - 1, begin + _CHUNK)
        a, b, t = contexts[begin:end], contexts[begin + 1:end + 1], targets[begin:end]
        la, lb, lt = context_len[begin:end], context_len[begin + 1:end + 1], target_len[begin:end]
        found = np.zeros(end - begin, np.int64)
        j = np.arange(width)[None, :]
        rows = np.arange(end - begin)[:, None]
        for s in range(1, min(max_shift, width - 1) + 1):
            overlap = lb - s                                   # tokens the two contexts share
            offset = la - overlap                              # where they start in the previous context
            ok = (overlap >= 1) & (offset >= 0) & (found == 0)
            source = np.clip(offset[:, None] + j, 0, width - 1)
            same = (a[rows, source] == b) | (j >= overlap[:, None])
            ok &= same.all(axis=1)
            k = np.arange(target_width)[None, :]
            new = np.clip(overlap[:, None] + k, 0, width - 1)   # the shift's tokens, against the target
            agree = (b[rows, new] == t) | (k >= np.minimum(s, lt)[:, None])
            ok &= agree.all(axis=1)
            found[ok] = s
        shifts[begin:end] = found
    return shifts


def rebuild_sequences(contexts: np.ndarray, targets: np.ndarray, order: np.ndarray | None = None) -> np.ndarray:
    """The text the windows were cut from, as one flat int64 stream with ``BREAK`` between sequences.

    A sequence starts with a window's whole context, grows by each next window's new tokens, and ends
    with its last window's target (the text after it, as far as the window holds it). ``order``: the
    windows' :func:`text_order`, when the caller has it already.
    """
    return rebuild_with_owners(contexts, targets, order)[0]


def rebuild_with_owners(contexts: np.ndarray, targets: np.ndarray, order: np.ndarray | None = None,
                        starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``rebuild_sequences``'s stream, for each of its entries the index of the window it came from (so the
    text of some windows can be left out: cross-fitting, models/seq2seq/count_reference.py), and, given the
    windows' word-start flags ``starts`` (``[n, context + target]``, :func:`read_windows`), which entries
    begin a word (the events counted at word starts, :func:`fit_orders`), else None."""
    contexts, targets = np.asarray(contexts), np.asarray(targets)
    n = len(contexts)
    if not n:
        return np.zeros([0], np.int64), np.zeros([0], np.int64), None if starts is None else np.zeros([0], bool)
    order = text_order(contexts, targets) if order is None else order
    stream, owners, events = _rebuild_in_order(contexts[order], targets[order],
                                               None if starts is None else starts[order])
    return stream, order[owners], events


def positions(order: np.ndarray) -> np.ndarray:
    """Where each window stands in the text: the inverse of the permutation ``order`` (:func:`text_order`)."""
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    return position


def text_order(contexts: np.ndarray, targets: np.ndarray, max_shift: int = MAX_SHIFT) -> np.ndarray:
    """A permutation of the windows that puts each after the window it continues, wherever one does.

    Transform (Beam) need not write the windows in the order of the text: on a large corpus most of
    them arrive out of order, and rebuilding in file order counts nearly every window's whole context
    as a sequence of its own (a 909k-word folder gave 10M tokens instead of 1M), and blocks of the file
    are not blocks of the text (held-out windows, cross-fitting folds). Window ``b`` continues
    ``a`` when ``b``'s context is ``a``'s without its first ``d`` tokens, followed by the first ``s`` tokens
    of ``a``'s target (``d``, ``s``: the tokens of the words the stride dropped and added, at most
    ``max_shift``; the two share ``MIN_OVERLAP`` tokens at least). Found in any order by hashing the
    contexts' suffixes and prefixes (polynomial hashes, checked exactly), the smallest ``s`` first; each
    window continues at most one and is continued by at most one.
    """
    n, width = contexts.shape
    contexts = contexts.astype(np.int64)
    successor = np.full(n, -1, np.int64)
    predecessor = np.full(n, -1, np.int64)
    length = _real(contexts, (features.PAD_ID,))
    target_len = _real(targets, (features.PAD_ID, features.END_ID))
    with np.errstate(over="ignore"):
        base = np.uint64(1_000_003)
        powers = np.cumprod(np.r_[np.uint64(1), np.full(width, base, np.uint64)]).astype(np.uint64)
        prefix = np.zeros([n, width + 1], np.uint64)       # prefix[i, k]: hash of the first k tokens
        prefix[:, 1:] = np.cumsum(contexts.astype(np.uint64) * powers[None, :width], axis=1, dtype=np.uint64)
        rows = np.arange(n)
        # Every suffix a[d:la] of every window (as the start of a successor's context): its hash is
        # (prefix[la] - prefix[d]) / base**d, compared as prefix hashes scaled by base**d instead.
        suffixes = []
        for d in range(1, max_shift + 1):
            ok = length - d >= MIN_OVERLAP
            a = rows[ok]
            key = (prefix[a, length[a]] - prefix[a, d]) * _inverse(base) ** np.uint64(d)
            suffixes.append(np.stack([key ^ (length[a] - d).astype(np.uint64), a.astype(np.uint64),
                                      np.full(len(a), d, np.uint64)], axis=1))
        table = np.concatenate(suffixes) if suffixes else np.zeros([0, 3], np.uint64)
        table = table[np.argsort(table[:, 0], kind="stable")]
        for s in range(1, max_shift + 1):
            for in_file in (True, False):  # the previous window in the file first: the text's own order there
                heads = np.flatnonzero((predecessor < 0) & (length - s >= MIN_OVERLAP))
                if in_file:
                    heads = heads[heads > 0]
                    a = heads - 1
                    d = length[a] - (length[heads] - s)
                    ok = (d >= 1) & (d <= max_shift)
                    heads, a, d = heads[ok], a[ok], d[ok]
                    free = (successor[a] < 0) & (a != heads)
                    _link(contexts, targets, length, target_len, successor, predecessor, heads[free], a[free],
                          d[free], s)
                else:
                    key = prefix[heads, length[heads] - s] ^ (length[heads] - s).astype(np.uint64)
                    _link_by_key(table, key, heads, contexts, targets, length, target_len, successor, predecessor, s)
    # Chains from their first window; a cycle (a text repeated whole) is cut where it is entered.
    order, seen = [], np.zeros(n, bool)
    for start in [*np.flatnonzero(predecessor < 0), *range(n)]:
        window = start
        while window >= 0 and not seen[window]:
            seen[window] = True
            order.append(window)
            window = successor[window]
    return np.asarray(order, np.int64)


def _link_by_key(table: np.ndarray, key: np.ndarray, heads: np.ndarray, contexts: np.ndarray, targets: np.ndarray,
                 length: np.ndarray, target_len: np.ndarray, successor: np.ndarray, predecessor: np.ndarray,
                 s: int) -> None:
    """Link each of ``heads`` after a window whose suffix hashes to its ``key`` (``table``: sorted hash, window,
    dropped tokens).

    Text repeated across documents (a license, a changelog formula) gives several windows of one key, and
    each copy must continue its own: the heads of one key are spread over the windows of that key (the
    ``r``-th head tries the ``r``-th window, then the next, ``LINK_ROUNDS`` times). Trying only the first window
    of a key left all copies but one to start anew, each with its whole context (a 1.08M-word folder of
    Debian documentation was rebuilt as 1.8 times its text).
    """
    if not len(table) or not len(heads):
        return
    left = np.searchsorted(table[:, 0], key, side="left")
    count = np.searchsorted(table[:, 0], key, side="right") - left
    heads, key, left, count = heads[count > 0], key[count > 0], left[count > 0], count[count > 0]
    by_key = np.argsort(key, kind="stable")
    rank = np.empty(len(key), np.int64)
    rank[by_key] = np.arange(len(key)) - np.searchsorted(key[by_key], key[by_key], side="left")
    for step in range(LINK_ROUNDS):
        waiting = (predecessor[heads] < 0) & (step < count)
        if not waiting.any():
            return
        h, at = heads[waiting], left[waiting] + (rank[waiting] + step) % count[waiting]
        a, d = table[at, 1].astype(np.int64), table[at, 2].astype(np.int64)
        free = (successor[a] < 0) & (a != h)
        _link(contexts, targets, length, target_len, successor, predecessor, h[free], a[free], d[free], s)


def _link(contexts: np.ndarray, targets: np.ndarray, length: np.ndarray, target_len: np.ndarray,
          successor: np.ndarray, predecessor: np.ndarray, heads: np.ndarray, a: np.ndarray, d: np.ndarray,
          s: int) -> None:
    """Link ``a -> heads`` (candidates continuing by ``s`` tokens after dropping ``d``) where checked exactly."""
    width = contexts.shape[1]
    # Checked exactly: the shared tokens, and the new ones against the previous window's target.
    j = np.arange(width)[None, :]
    overlap = (length[heads] - s)[:, None]
    shared = contexts[a[:, None], np.clip(d[:, None] + j, 0, width - 1)]
    same = (shared == contexts[heads[:, None], j]) | (j >= overlap)
    k = np.arange(s)[None, :]
    added = contexts[heads[:, None], np.clip(overlap + k, 0, width - 1)]
    new = (added == targets[a[:, None], np.minimum(k, targets.shape[1] - 1)]) | (k >= target_len[a][:, None])
    good = same.all(axis=1) & new.all(axis=1)
    heads, a = heads[good], a[good]
    a, first = np.unique(a, return_index=True)      # a window is continued by one window at most
    heads = heads[first]
    heads, first = np.unique(heads, return_index=True)
    a = a[first]
    successor[a], predecessor[heads] = heads, a


def _inverse(odd: np.uint64) -> np.uint64:
    """The inverse of an odd number modulo 2**64 (Newton's iteration)."""
    with np.errstate(over="ignore"):
        x = odd
        for _ in range(6):
            x = x * (np.uint64(2) - odd * x)
    return x


def _rebuild_in_order(contexts: np.ndarray, targets: np.ndarray,
                      word_starts: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    n = len(contexts)
    shifts = window_shifts(contexts, targets)
    starts = np.r_[True, shifts == 0]                    # the window opens a sequence
    ends = np.r_[shifts == 0, True]                      # the window closes one
    context_len = _real(contexts, (features.PAD_ID,))
    target_len = _real(targets, (features.PAD_ID, features.END_ID))
    first = np.where(starts, 0, context_len - np.r_[0, shifts])
    width, target_width = contexts.shape[1], targets.shape[1]
    keep_context = (np.arange(width)[None, :] >= first[:, None]) & (np.arange(width)[None, :] < context_len[:, None])
    keep_target = ends[:, None] & (np.arange(target_width)[None, :] < target_len[:, None])
    rows = np.concatenate([contexts, targets, np.full([n, 1], BREAK, contexts.dtype)], axis=1)
    keep = np.concatenate([keep_context, keep_target, ends[:, None]], axis=1)
    owners = np.broadcast_to(np.arange(n)[:, None], keep.shape)
    events = (None if word_starts is None
              else np.concatenate([word_starts.astype(bool), np.zeros([n, 1], bool)], axis=1)[keep])
    return rows[keep].astype(np.int64), owners[keep].astype(np.int64), events


def read_windows(patterns: str | Sequence[str], context_tokens: int, target_tokens: int,
                 rows: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(contexts, targets) of the transformed examples in ``patterns`` (GZIP if .gz), in file order;
    only the (sorted) indices ``rows`` when given."""
    contexts, targets, _ = read_windows_and_starts(patterns, context_tokens, target_tokens, rows, with_starts=False)
    return contexts, targets


def read_windows_and_starts(patterns: str | Sequence[str], context_tokens: int, target_tokens: int,
                            rows: np.ndarray | None = None, with_starts: bool = True
                            ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """:func:`read_windows` and the windows' word-start flags, ``[n, context_tokens + target_tokens]`` booleans
    (models/seq2seq/features.py), or None where the records have none (a Transform output from before them)."""
    from data.tfrecords import list_files

    spec = {features.CONTEXT_XF: tf.io.FixedLenFeature([context_tokens], tf.int64),
            features.TARGET_XF: tf.io.FixedLenFeature([target_tokens], tf.int64)}
    if with_starts:
        spec[features.CONTEXT_STARTS_XF] = tf.io.FixedLenFeature([context_tokens], tf.int64, [-1] * context_tokens)
        spec[features.TARGET_STARTS_XF] = tf.io.FixedLenFeature([target_tokens], tf.int64, [-1] * target_tokens)
    width = context_tokens + target_tokens
    contexts, targets = [np.zeros([0, context_tokens], np.int32)], [np.zeros([0, target_tokens], np.int32)]
    starts: list[np.ndarray] | None = [np.zeros([0, width], bool)] if with_starts else None
    offset = 0
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        for path in list_files(pattern):
            compression = "GZIP" if path.lower().endswith(".gz") else ""
            for batch in tf.data.TFRecordDataset(path, compression_type=compression).batch(8192):
                parsed = tf.io.parse_example(batch, spec)
                # int32: a large corpus's windows are held in memory (ids stay far below 2**31).
                context = parsed[features.CONTEXT_XF].numpy().astype(np.int32)
                target = parsed[features.TARGET_XF].numpy().astype(np.int32)
                flags = None
                if starts is not None:
                    flags = np.concatenate([parsed[features.CONTEXT_STARTS_XF].numpy(),
                                            parsed[features.TARGET_STARTS_XF].numpy()], axis=1)
                    if (flags < 0).any():   # the default: records written without the flags
                        starts = None
                if rows is not None:
                    wanted = rows[(rows >= offset) & (rows < offset + len(context))] - offset
                    offset += len(context)
                    context, target = context[wanted], target[wanted]
                    flags = None if flags is None else flags[wanted]
                contexts.append(context)
                targets.append(target)
                if starts is not None and flags is not None:
                    starts.append(flags > 0)
    return np.concatenate(contexts), np.concatenate(targets), None if starts is None else np.concatenate(starts)


# ----------------------------------------------------------------------------- the fit


def discounts(counts: np.ndarray) -> tuple[float, float, float]:
    """(D1, D2, D3+) from the count-of-counts of ``counts`` (Chen and Goodman's estimates), each falling back to
    ``FALLBACK_DISCOUNTS`` when the formula cannot give a value in ``(0, c)``."""
    n1, n2, n3, n4 = (float((counts == c).sum()) for c in (1, 2, 3, 4))
    y = n1 / (n1 + 2 * n2) if n1 + n2 else None
    estimates = [1 - 2 * y * n2 / n1 if y is not None and n1 else None,
                 2 - 3 * y * n3 / n2 if y is not None and n2 else None,
                 3 - 4 * y * n4 / n3 if y is not None and n3 else None]
    return tuple(float(d) if d is not None and 0 < d < c else fallback  # type: ignore[return-value]
                 for c, d, fallback in zip((1, 2, 3), estimates, FALLBACK_DISCOUNTS))


def _uniform_ids(vocab_size: int) -> np.ndarray:
    ids = np.zeros(vocab_size, bool)
    ids[len(features.RESERVED_TOKENS):] = True
    return ids if ids.any() else np.ones(vocab_size, bool)


def fit(stream: np.ndarray, vocab_size: int, max_order: int = MAX_ORDER,
        events: np.ndarray | None = None, grams: Grams | None = None) -> dict[str, np.ndarray]:
    """The tables :class:`KneserNey` serves, from a token ``stream`` (``BREAK`` between sequences).

    Keys: ``order`` (the highest order fitted: lower than ``max_order`` when the text holds no longer
    n-gram), ``unigram`` ``[V]``; per order ``k >= 2``: ``keys_k`` (sorted ``suffix_id * V + first_token``
    of the (k-1)-grams, whose index is the history id; order 2's history ids are token ids), the CSR
    ``splits_k``/``cols_k``/``vals_k`` (history id -> next token, discounted share) and ``gamma_k``.
    ``events``: booleans over ``stream``, the positions whose n-grams are counted (at every order: occurrences
    at the top, continuations below); None counts every position. Word starts (:func:`rebuild_with_owners`)
    give the model of the events the eval windows ask for: a next word's first token, given the tokens before.
    ``grams``: the stream's :func:`count_grams`, when another fit of the same stream computed them.
    Raises :class:`NotFitted` for a stream with fewer than two distinct tokens (at the events).
    """
    return fit_orders(stream, vocab_size, (max_order,), events, grams)[max_order]


class Grams(NamedTuple):
    """Every k-gram of a stream named by an id, up to ``max_order``: ``gram[k][t]``, the id of the k-gram ending
    at ``t`` (BREAK where it would cross a sequence start), and ``keys[k]``, the sorted keys those ids index
    (``id of the (k-1)-gram suffix * V + first token``). What every fit of the stream sorts the text for,
    whichever positions it counts: the fits of every position and of word starts share it."""
    gram: dict[int, np.ndarray]
    keys: dict[int, np.ndarray]
    max_order: int


def count_grams(stream: np.ndarray, vocab_size: int, max_order: int) -> Grams:
    """The :class:`Grams` of ``stream`` up to ``max_order`` (fewer where the text holds no longer n-gram)."""
    V = int(vocab_size)
    stream = np.asarray(stream, np.int64)
    gram = {1: np.where(stream == BREAK, BREAK, stream)}
    keys: dict[int, np.ndarray] = {}
    for k in range(2, max_order + 1):
        valid = np.zeros(len(stream), bool)
        valid[k - 1:] = (gram[k - 1][k - 1:] != BREAK) & (stream[:len(stream) - k + 1] != BREAK)
        if not valid.any():
            break
        first = np.zeros(len(stream), np.int64)
        first[k - 1:] = stream[:len(stream) - k + 1]
        key = gram[k - 1] * V + first
        keys[k], ids = np.unique(key[valid], return_inverse=True)
        gram[k] = np.full(len(stream), BREAK, np.int64)
        gram[k][valid] = ids.reshape(-1)
    return Grams(gram, keys, max_order)


def fit_orders(stream: np.ndarray, vocab_size: int, orders: Sequence[int],
               events: np.ndarray | None = None, grams: Grams | None = None) -> dict[int, dict[str, np.ndarray]]:
    """:func:`fit`'s tables for each highest order of ``orders``, sharing one count of the text: the models
    differ only at their top order (occurrences there, continuations below), so the n-grams are counted once
    (the order's choice by cross-fitting, models/seq2seq/count_reference.py). An order the text cannot give
    falls back to the highest it can. ``grams``: as :func:`fit`, up to at least ``max(orders)``."""
    V = int(vocab_size)
    stream = np.asarray(stream, np.int64)
    counted = stream != BREAK if events is None else (stream != BREAK) & np.asarray(events, bool)
    distinct = np.unique(stream[counted])
    if len(distinct) < 2:
        where = "at the word starts of " if events is not None else ""
        raise NotFitted(f"{where}the train text holds {len(distinct)} distinct token{'s' if len(distinct) != 1 else ''}"
                        ": nothing to predict from counts")
    if grams is None or grams.max_order < max(orders):
        grams = count_grams(stream, V, max(orders))
    gram, keys = grams.gram, grams.keys
    top = max(gram)
    levels: dict[tuple[int, bool], dict[str, np.ndarray]] = {}

    def level(k: int, occurrences: bool) -> dict[str, np.ndarray]:
        if (k, occurrences) not in levels:
            levels[k, occurrences] = _level(k, occurrences, gram, keys, stream, V, counted)
        return levels[k, occurrences]

    fitted: dict[int, dict[str, np.ndarray]] = {}
    for order in sorted({min(wanted, top) for wanted in orders}):
        tables: dict[str, np.ndarray] = {"order": np.asarray(order, np.int64)}
        for k in range(order, 0, -1):
            tables.update(level(k, k == order))
            if k >= 3:
                tables[f"keys_{k - 1}"] = keys[k - 1].astype(np.int64)
        fitted[order] = tables
    return {wanted: fitted[min(wanted, top)] for wanted in orders}


def _level(k: int, occurrences: bool, gram: dict[int, np.ndarray], keys: dict[int, np.ndarray], stream: np.ndarray,
           V: int, counted: np.ndarray) -> dict[str, np.ndarray]:
    """Order ``k``'s tables: from occurrence counts (the model's top order) or continuation counts (below it),
    of the n-grams ending at a ``counted`` position."""
    if occurrences:
        present = (gram[k] != BREAK) & counted
        grams, counts = np.unique(gram[k][present], return_counts=True)
    else:           # continuations: distinct (k+1)-grams whose suffix is the k-gram
        above = np.unique(gram[k + 1][(gram[k + 1] != BREAK) & counted])
        grams, counts = np.unique(keys[k + 1][above] // V, return_counts=True)
    # Each gram's history (the (k-1)-gram before its last token) and last token, from one occurrence.
    if k > 1:
        positions = np.flatnonzero(gram[k] != BREAK)
        where = np.zeros(len(keys[k]), np.int64)
        where[gram[k][positions]] = positions  # any occurrence will do
        at = where[grams]
        history, word = gram[k - 1][at - 1], stream[at]
    else:
        history, word = np.zeros(len(grams), np.int64), grams
    d = discounts(counts)
    discount = np.where(counts >= 3, d[2], np.where(counts == 2, d[1], d[0]))
    rows = len(keys[k - 1]) if k > 2 else V if k == 2 else 1
    total = np.bincount(history, weights=counts, minlength=rows)
    left = np.bincount(history, weights=discount, minlength=rows)
    seen = total > 0
    safe = np.where(seen, total, 1.0)
    value = np.maximum(counts - discount, 0) / safe[history]
    if k == 1:
        uniform = _uniform_ids(V)
        p1 = np.zeros(V)
        p1[word] = value
        p1 += left[0] / safe[0] * uniform / uniform.sum()
        return {"unigram": p1.astype(np.float32)}
    sort = np.lexsort((word, history))
    splits = np.zeros(rows + 1, np.int64)
    np.add.at(splits, history + 1, 1)
    return {f"splits_{k}": np.cumsum(splits), f"cols_{k}": word[sort].astype(np.int32),
            f"vals_{k}": value[sort].astype(np.float32),
            f"gamma_{k}": np.where(seen, left / safe, 1.0).astype(np.float32)}


# ----------------------------------------------------------------------------- scoring (TF)


class KneserNey(tf.Module):
    """Fitted tables (:func:`fit`) as variables; :meth:`probabilities` for a batch of contexts."""

    def __init__(self, tables: dict[str, np.ndarray], name: str = "kneser_ney"):
        super().__init__(name=name)
        self.vocab_size = int(len(tables["unigram"]))
        self.order = int(tables["order"])
        with self.name_scope:
            self.tables = {key: tf.Variable(np.asarray(value), trainable=False, name=key)
                           for key, value in tables.items() if key != "order"}

    def probabilities(self, context_ids: tf.Tensor) -> tf.Tensor:
        """Right-padded ``[batch, Lc]`` ids -> ``[batch, V]`` next-token probabilities (rows sum to 1)."""
        return _probabilities(self.tables, self.order, self.vocab_size, context_ids)


def scorer(tables: dict[str, np.ndarray]) -> Scorer:
    """``context_ids -> [batch, V]`` probabilities of fitted ``tables``, as :meth:`KneserNey.probabilities`
    computes them, in one traced graph shared by every fit of the same order and vocabulary.

    For scoring many fits (cross-fitting: folds x orders x ways of counting) rather than serving one: run
    eagerly, the scorer's few dozen ops cost more in dispatch than in arithmetic on a small vocabulary, and
    a :class:`KneserNey` per fit would make variables (and a trace) per fit."""
    order, vocab_size = int(tables["order"]), int(len(tables["unigram"]))
    values = {key: tf.constant(np.asarray(value)) for key, value in tables.items() if key != "order"}
    traced = _traced_scorer(order, vocab_size, tuple(sorted((key, value.dtype.name, value.shape.rank)
                                                            for key, value in values.items())))
    return lambda context_ids: traced(tf.cast(context_ids, tf.int64), values)


@functools.cache
def _traced_scorer(order: int, vocab_size: int, layout: tuple[tuple[str, str, int], ...]):
    signature = (tf.TensorSpec([None, None], tf.int64),
                 {key: tf.TensorSpec([None] * rank, tf.as_dtype(dtype)) for key, dtype, rank in layout})
    return tf.function(lambda context_ids, tables: _probabilities(tables, order, vocab_size, context_ids),
                       input_signature=signature)


def _probabilities(t, order: int, vocab_size: int, context_ids: tf.Tensor) -> tf.Tensor:
    """:meth:`KneserNey.probabilities` on tables ``t`` (variables or tensors, keyed as :func:`fit` writes them)."""
    context_ids = tf.cast(context_ids, tf.int64)
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(context_ids, features.PAD_ID), tf.int64), axis=1)
    batch = tf.shape(context_ids, out_type=tf.int64)[0]
    shape = tf.stack([batch, tf.constant(vocab_size, tf.int64)])
    p = tf.broadcast_to(t["unigram"][None, :], tf.cast(shape, tf.int32))
    history = _last(context_ids, lengths, 1)          # the 1-gram before the next token: its own id
    found = lengths >= 1
    for k in range(2, order + 1):
        if k >= 3:  # extend the history one token to the left
            keys = t[f"keys_{k - 1}"]
            query = history * vocab_size + _last(context_ids, lengths, k - 1)
            count = tf.size(keys, out_type=tf.int64)
            position = tf.minimum(tf.searchsorted(keys, query, out_type=tf.int64), tf.maximum(count - 1, 0))
            found = found & (lengths >= k - 1) & (count > 0) & tf.equal(tf.gather(keys, position), query)
            history = tf.where(found, position, 0)
        row = tf.where(found, history, 0)
        start = tf.where(found, tf.gather(t[f"splits_{k}"], row), 0)
        end = tf.where(found, tf.gather(t[f"splits_{k}"], row + 1), 0)
        gamma = tf.where(found, tf.gather(t[f"gamma_{k}"], row), 1.0)
        p = gamma[:, None] * p + _scatter_rows(start, end, t[f"cols_{k}"], t[f"vals_{k}"], shape)
    return p


def _last(context_ids: tf.Tensor, lengths: tf.Tensor, back: int) -> tf.Tensor:
    """The ``back``-th last real id of each row (PAD when the row is shorter)."""
    values = tf.gather(context_ids, tf.maximum(lengths - back, 0), batch_dims=1)
    return tf.where(lengths >= back, values, tf.constant(features.PAD_ID, tf.int64))


def _scatter_rows(starts: tf.Tensor, ends: tf.Tensor, cols: tf.Tensor, vals: tf.Tensor,
                  shape: tf.Tensor) -> tf.Tensor:
    """Dense ``[batch, V]`` holding row ``[starts[b], ends[b])`` of a CSR table in row ``b``."""
    positions = tf.ragged.range(starts, ends)
    flat = positions.flat_values
    indices = tf.stack([positions.value_rowids(), tf.cast(tf.gather(cols, flat), tf.int64)], axis=1)
    return tf.scatter_nd(indices, tf.gather(vals, flat), shape)

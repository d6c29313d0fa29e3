"""Which windows of a text corpus are held out for evaluation: pure functions, no I/O.

Why not ExampleGen's hash split: it hashes one feature per example. Hashing the window
puts nearly the same text on both sides (windows overlap), and hashing the document
leaves one split empty for a one-file corpus and lets one long document swing the eval
share anywhere between 0 and 100%. So the data preparation decides, and ExampleGen only
reads the two splits it is given.

Two methods, chosen per corpus:

``documents``
    Whole documents are held out, when that gives eval 15-25% of the windows in at least
    ``MIN_EVAL_DOCUMENTS`` documents: eval then measures continuing text never seen in
    training. Documents are taken in a fixed order (sha256 of their id) until eval holds
    ``EVAL_TARGET`` of the windows, skipping any that would push it past ``EVAL_MAX``;
    appending text to a document can only move documents at the margin of that walk.
``blocks``
    Otherwise (one file, or a few documents of uneven length) every document is cut into
    contiguous blocks: each cycle of ``cycle`` windows is ``[train][gap][eval][gap][train]``.
    The ``gap`` windows are dropped: they are exactly the windows that share a word with
    both an eval window and a train window, so no training window overlaps an eval one.
    A window's split depends only on its index and the cycle, so appending text to a
    document leaves its earlier windows where they were (the cycle shrinks for short
    documents only, from ``MAX_CYCLE`` down, so that each has several eval blocks spread
    over its start, middle and end). A document too short for three cycles holds out its
    last windows (a tail), and one too short for a gap goes whole to one side.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from collections.abc import Mapping

TRAIN, EVAL = "train", "eval"
EVAL_TARGET, EVAL_MIN, EVAL_MAX = 0.20, 0.15, 0.25
MIN_EVAL_DOCUMENTS = 3
MAX_CYCLE = 400        # windows per train/eval cycle in long documents (800 words at stride 2)
MIN_CYCLES = 3         # cycles a document needs for the cycle layout; shorter ones hold out a tail


@dataclasses.dataclass(frozen=True)
class DocumentSplit:
    """The split of one document's windows 0..count-1 (see :meth:`label`)."""

    count: int
    whole: str | None = None      # TRAIN or EVAL: every window; None: blocks below
    cycle: int = 0                # > 0: repeating [train lead][gap][eval][gap][train]
    lead: int = 0                 # train windows before the eval block (cycle or tail layout)
    eval_windows: int = 0         # eval block length
    gap: int = 0

    def label(self, index: int) -> str | None:
        """TRAIN, EVAL or None (a dropped gap window)."""
        if self.whole is not None:
            return self.whole
        r = index % self.cycle if self.cycle else index
        if r < self.lead:
            return TRAIN
        if r < self.lead + self.gap:
            return None
        if r < self.lead + self.gap + self.eval_windows:
            return EVAL
        if r < self.lead + 2 * self.gap + self.eval_windows:
            return None
        return TRAIN

    def counts(self) -> dict[str, int]:
        """Windows per TRAIN / EVAL / "gap"."""
        if self.whole is not None:
            return {TRAIN: 0, EVAL: 0, "gap": 0, self.whole: self.count}
        if not self.cycle:
            return self._prefix_counts(self.count)
        full, rest = divmod(self.count, self.cycle)
        one, tail = self._prefix_counts(self.cycle), self._prefix_counts(rest)
        return {key: full * one[key] + tail[key] for key in one}

    def _prefix_counts(self, m: int) -> dict[str, int]:
        """Counts over the first ``m`` windows of one pattern (cycle or tail)."""
        train = min(m, self.lead) + max(0, m - (self.lead + 2 * self.gap + self.eval_windows))
        held = min(max(0, m - self.lead - self.gap), self.eval_windows)
        return {TRAIN: train, EVAL: held, "gap": m - train - held}


@dataclasses.dataclass(frozen=True)
class CorpusSplit:
    method: str                       # "documents" or "blocks"
    documents: dict[str, DocumentSplit]
    gap: int

    def label(self, document: str, index: int) -> str | None:
        return self.documents[document].label(index)

    @functools.cached_property
    def kept_windows(self) -> int:
        """Train and eval windows together: what the ExampleGen writes (its progress line's total)."""
        counts = self.counts()
        return counts[TRAIN] + counts[EVAL]

    def counts(self) -> dict[str, int]:
        total = {TRAIN: 0, EVAL: 0, "gap": 0}
        for doc in self.documents.values():
            for key, value in doc.counts().items():
                total[key] += value
        return total

    @property
    def eval_fraction(self) -> float:
        c = self.counts()
        return c[EVAL] / max(1, c[EVAL] + c[TRAIN])

    def describe(self) -> str:
        """One line for the run summary: how the split was made."""
        c = self.counts()
        share = f"eval {c[EVAL]} of {c[EVAL] + c[TRAIN]} windows ({100 * self.eval_fraction:.1f}%)"
        if self.method == "documents":
            held = sum(1 for d in self.documents.values() if d.whole == EVAL)
            return (f"whole documents: {held} of {len(self.documents)} held out for eval, {share}")
        return (f"blocks inside documents (too few or too uneven documents to hold out whole ones): contiguous "
                f"eval blocks with {self.gap}-window gaps dropped on each side, so no train window "
                f"overlaps an eval window; {share}, {c['gap']} gap windows dropped")

    def to_json(self) -> dict:
        return {"method": self.method, "gap_windows": self.gap, "description": self.describe(),
                "eval_fraction": round(self.eval_fraction, 4), **{f"{k}_windows_total": v
                                                                   for k, v in self.counts().items()}}


def gap_windows(context_words: int, target_words: int, stride: int) -> int:
    """Windows to drop between a train and an eval block so that none shares a word.

    Window i covers words ``[i*stride, i*stride + span)``: windows i < j share a word
    iff ``(j - i) * stride < span``. At least one window is dropped even without overlap,
    so an eval block never continues the sentence a train block stopped in.
    """
    span = context_words + target_words
    return max(1, math.ceil(span / stride) - 1)


def split_corpus(window_counts: Mapping[str, int], gap: int) -> CorpusSplit:
    """Split documents (id -> window count) into train/eval; see the module docstring."""
    whole = _whole_documents(window_counts)
    if whole is not None:
        return CorpusSplit("documents", whole, gap)
    documents = {doc: _split_document(count, gap) for doc, count in window_counts.items()}
    totals = CorpusSplit("blocks", documents, gap).counts()
    # Documents too short to cut go whole; top eval up with them, in hash order.
    for doc in sorted((d for d, s in documents.items() if s.whole is not None), key=_order):
        kept = totals[TRAIN] + totals[EVAL]
        if totals[EVAL] >= EVAL_TARGET * kept:
            break
        if totals[EVAL] + window_counts[doc] <= EVAL_MAX * kept:
            documents[doc] = DocumentSplit(window_counts[doc], whole=EVAL)
            totals[TRAIN] -= window_counts[doc]
            totals[EVAL] += window_counts[doc]
    return CorpusSplit("blocks", documents, gap)


def _order(document: str) -> str:
    return hashlib.sha256(document.encode("utf-8")).hexdigest()


def _whole_documents(window_counts: Mapping[str, int]) -> dict[str, DocumentSplit] | None:
    total = sum(window_counts.values())
    if len(window_counts) < MIN_EVAL_DOCUMENTS + 1 or total == 0:
        return None
    held, held_windows = set(), 0
    for doc in sorted(window_counts, key=_order):
        if held_windows >= EVAL_TARGET * total:
            break
        if held_windows + window_counts[doc] <= EVAL_MAX * total:
            held.add(doc)
            held_windows += window_counts[doc]
    if len(held) < MIN_EVAL_DOCUMENTS or held_windows < EVAL_MIN * total or len(held) == len(window_counts):
        return None
    return {doc: DocumentSplit(count, whole=EVAL if doc in held else TRAIN)
            for doc, count in window_counts.items()}


def _split_document(count: int, gap: int) -> DocumentSplit:
    kept = count - gap
    if kept < 2:
        return DocumentSplit(count, whole=TRAIN)
    cycle = MAX_CYCLE
    while count < MIN_CYCLES * cycle and cycle // 2 >= 8 * gap:
        cycle //= 2
    if count >= MIN_CYCLES * cycle and cycle >= 2 * gap + 5:
        eval_windows = _eval_share(cycle - 2 * gap)
        lead = (cycle - 2 * gap - eval_windows) // 2
        layout = DocumentSplit(count, cycle=cycle, lead=lead, eval_windows=eval_windows, gap=gap)
        if EVAL_MIN <= _fraction(layout) <= EVAL_MAX:
            return layout
    # A tail: [train][gap][eval], the eval block last.
    eval_windows = _eval_share(kept)
    tail = DocumentSplit(count, lead=kept - eval_windows, eval_windows=eval_windows, gap=gap)
    return tail


def _eval_share(kept: int) -> int:
    """Eval windows out of ``kept``: nearest to EVAL_TARGET inside [EVAL_MIN, EVAL_MAX] if any."""
    low, high = math.ceil(EVAL_MIN * kept), math.floor(EVAL_MAX * kept)
    best = round(EVAL_TARGET * kept)
    if low <= high:
        best = min(max(best, low), high)
    return min(max(1, best), kept - 1)


def _fraction(split: DocumentSplit) -> float:
    c = split.counts()
    return c[EVAL] / max(1, c[EVAL] + c[TRAIN])

"""What a text corpus was made of: documents used, files not used and why, guessed encodings.

One record, :class:`CorpusFacts`, written by both readers (the prepare step in
``data.text`` and the ExampleGen in ``components/text_example_gen.py``) into the data's
facts (``corpus`` in the manifest's ``extra`` / the Examples artifact's ``corpus`` property), and read back by the
run summary and the report. A file that cannot be used never stops a run: it is counted
and named here. Only a corpus with too little left to train and evaluate stops it, with
:func:`too_little_error`, one paragraph listing every reason at once.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from data.errors import DataError

#: Why a file is not used -> the words the summary uses (in this order).
REASONS = {
    "short": "shorter than one window",
    "empty": "empty",
    "binary": "binary",
    "format": "other format",
    "too_large": "too large",
    "unreadable": "unreadable",
    "special": "not a regular file",
    "loop": "symlink loop",
    "outside": "symlink leaving the folder (--follow-links reads it)",
}
#: Names shown per reason in the summary line; the Examples artifact and the report list them all.
NAMES_SHOWN = 5
#: Fewest distinct words a corpus may have. The text family is judged on top-5 next-word accuracy
#: (models/seq2seq/baselines.py TOP_K): with fewer than twice that many words, any five guesses cover half
#: the vocabulary or more, so the metric, the gate and the model say nothing. A file of one word repeated
#: (a placeholder, a failed export) is the usual cause. A small cycle of a dozen words is still allowed:
#: tests/test_e2e_default_gate.py trains on one on purpose.
MIN_DISTINCT_WORDS = 10


def first_distinct(words: Iterable[str], limit: int = MIN_DISTINCT_WORDS) -> frozenset[str]:
    """Up to ``limit`` distinct words of ``words`` (bounded memory: only whether a corpus reaches the minimum
    matters, and which few words it has when it does not)."""
    seen: set[str] = set()
    for word in words:
        seen.add(word)
        if len(seen) >= limit:
            break
    return frozenset(seen)


def too_few_words_error(description: str, facts: CorpusFacts, distinct: frozenset[str]) -> DataError:
    """The paragraph for a degenerate corpus: a handful of distinct words repeated."""
    shown = ", ".join(repr(w[:40]) for w in sorted(distinct)) or "none"
    return DataError(
        f"{description[:1].upper()}{description[1:]} has only {len(distinct)} distinct word"
        f"{'' if len(distinct) == 1 else 's'} ({shown}) in {_count(facts.words)} words over "
        f"{_plural(facts.documents, 'document')}; a text model needs at least {MIN_DISTINCT_WORDS}: it is judged on "
        "top-5 next-word accuracy, which a handful of words makes trivially high, so no training was started. "
        "Check that --data names the documents you meant (a file of one repeated word is often a placeholder or "
        "a failed export), or add real text.")


MIB = 2**20
#: The flag of the corpus budget (the seq2seq family's ``--max-text-mb``, pipeline/families/seq2seq.py).
BUDGET_FLAG = "--max-text-mb"


def over_budget_error(description: str, reached: str, total: int, max_text_mb: int, done: int, files: int
                      ) -> DataError:
    """The paragraph for a corpus past its budget of decompressed text: where it ran out and how to raise it."""
    return DataError(
        f"The text of {description} is more than {BUDGET_FLAG} {max_text_mb} MiB once decompressed: {done} of "
        f"{files} files read ({total // MIB} MiB of text) when {reached} reached the budget (compressed files "
        "can hold far more text than their size). Nothing was written. If the machine has the memory (the "
        f"text takes several times its size as words), raise it, e.g. {BUDGET_FLAG} {max_text_mb * 4}; or "
        "point --data at a folder holding fewer or smaller files.")


@dataclasses.dataclass(frozen=True)
class Skip:
    document: str   # the id a used file would have had (its path below the folder)
    reason: str     # a key of REASONS
    detail: str = ""


@dataclasses.dataclass(frozen=True)
class Guessed:
    document: str
    encoding: str


@dataclasses.dataclass
class CorpusFacts:
    documents: int
    words: int
    skipped: list[Skip]
    guessed: list[Guessed] = dataclasses.field(default_factory=list)
    #: Documents read whose file names are not UTF-8, by their printable ids (``data.walk.printable``).
    not_utf8_names: list[str] = dataclasses.field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"documents": self.documents, "words": self.words,
                "skipped": [dataclasses.asdict(s) for s in sorted(self.skipped, key=_order)],
                "guessed_encodings": [dataclasses.asdict(g) for g in sorted(self.guessed, key=lambda g: g.document)],
                **({"not_utf8_names": sorted(self.not_utf8_names)} if self.not_utf8_names else {})}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CorpusFacts:
        return cls(int(data.get("documents", 0)), int(data.get("words", 0)),
                   [Skip(**s) for s in data.get("skipped", [])],
                   [Guessed(**g) for g in data.get("guessed_encodings", [])],
                   list(data.get("not_utf8_names", [])))

    def describe(self) -> str:
        """The summary line: "212 documents read (96k words); 3 not used: 2 shorter than ..."."""
        line = f"{_plural(self.documents, 'document')} read ({_count(self.words)} words)"
        if self.skipped:
            line += f"; {len(self.skipped)} not used: {reasons_text(self.skipped)}"
        if self.guessed:
            names = ", ".join(f"{g.document} ({g.encoding})" for g in sorted(self.guessed, key=lambda g: g.document)
                              [:NAMES_SHOWN])
            more = len(self.guessed) - NAMES_SHOWN
            line += (f"; {len(self.guessed)} not UTF-8, read with a guessed encoding: {names}"
                     + (f" and {more} more" if more > 0 else ""))
        if self.not_utf8_names:
            names = ", ".join(sorted(self.not_utf8_names)[:NAMES_SHOWN])
            more = len(self.not_utf8_names) - NAMES_SHOWN
            line += (f"; {len(self.not_utf8_names)} read under a file name that is not UTF-8 (each such byte shown "
                     f"as \\xNN): {names}" + (f" and {more} more" if more > 0 else ""))
        return line


def reasons_text(skipped: Iterable[Skip]) -> str:
    """``2 shorter than one window (a.txt, b.txt), 1 binary (c.bin)``: counts and names per reason."""
    by_reason: dict[str, list[str]] = {}
    for skip in sorted(skipped, key=_order):
        by_reason.setdefault(skip.reason, []).append(skip.document)
    parts = []
    for reason, names in by_reason.items():
        shown = ", ".join(names[:NAMES_SHOWN]) + (f" and {len(names) - NAMES_SHOWN} more"
                                                  if len(names) > NAMES_SHOWN else "")
        parts.append(f"{len(names)} {REASONS.get(reason, reason)} ({shown})")
    return ", ".join(parts)


def too_little_error(description: str, facts: CorpusFacts, settings: dict, problem: str) -> DataError:
    """The one paragraph for a corpus with too little left: ``problem``, then every file not used."""
    span = settings["context_words"] + settings["target_words"]
    found = facts.documents + len(facts.skipped)
    unused = (f" Of the {_plural(found, 'file')} found, {len(facts.skipped)} could not be used: "
              f"{reasons_text(facts.skipped)}." if facts.skipped else "")
    return DataError(
        f"{description[:1].upper()}{description[1:]} leaves too little to train and evaluate: {problem}.{unused} "
        "Documents are "
        ".txt, .md, .rst and .html files (also .gz, .bz2, .xz) or plain-text files without a suffix, in any "
        f"sub-folder; each needs at least {span} words for one window of {settings['context_words']} context + "
        f"{settings['target_words']} target words. Add text, or lower --context-words / --target-words.")


def _order(skip: Skip) -> tuple[int, str]:
    keys = list(REASONS)
    return (keys.index(skip.reason) if skip.reason in keys else len(keys), skip.document)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _count(value: int) -> str:
    """96000 -> "96k", 1250000 -> "1.2M": a size the eye takes in."""
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value // 1000}k"
    return str(value)

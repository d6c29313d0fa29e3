"""Count-based reference points for next-token top-5 accuracy, on the model's own tokens.

They read the TRANSFORMED examples, so tokenization, vocabulary and OOV id are exactly the
model's: a model that does not beat them has learned nothing a frequency table would not.

- unigram: always guess the 5 most frequent next tokens of the train windows;
- bigram: guess the 5 most frequent next tokens that followed the window's last context
  token in train (a window boundary always falls between two words, so the counts are
  taken at the same kind of boundary), backing off to the unigram guess for a last token
  never seen in train.

Ties are broken by the smaller token id, so results are deterministic.
"""
import collections
from collections.abc import Iterable, Sequence

from data.tfrecords import read_examples
from models.seq2seq import features

TOP_K = 5
Patterns = str | Sequence[str]  # a glob, or a list of them (TFX fn_args files)


def ngram_baselines(train_pattern: Patterns, eval_pattern: Patterns) -> dict[str, float]:
    """``{"unigram_top5", "bigram_top5", "eval_examples"}`` for TFRecord globs (GZIP if .gz).

    A pattern may be a list of globs, as TFX's ``fn_args.train_files``.
    """
    unigram: collections.Counter = collections.Counter()
    bigram: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for last, next_token in _pairs(train_pattern):
        unigram[next_token] += 1
        bigram[last][next_token] += 1
    unigram_guess = _top(unigram)
    bigram_guess = {last: _top(counts, fallback=unigram_guess) for last, counts in bigram.items()}
    total = unigram_hits = bigram_hits = 0
    for last, next_token in _pairs(eval_pattern):
        total += 1
        unigram_hits += next_token in unigram_guess
        bigram_hits += next_token in bigram_guess.get(last, unigram_guess)
    return {
        "unigram_top5": unigram_hits / total if total else 0.0,
        "bigram_top5": bigram_hits / total if total else 0.0,
        "eval_examples": total,
    }


def _pairs(patterns: Patterns) -> Iterable[tuple[int, int]]:
    """(last non-pad context id, next token id) per transformed example."""
    for pattern in [patterns] if isinstance(patterns, str) else patterns:
        yield from _file_pairs(pattern)


def _file_pairs(pattern: str) -> Iterable[tuple[int, int]]:
    for example in read_examples(pattern):
        feature = example.features.feature
        context = [t for t in feature[features.CONTEXT_XF].int64_list.value
                   if t != features.PAD_ID]
        yield (context[-1] if context else features.PAD_ID,
               feature[features.NEXT_TOKEN_XF].int64_list.value[0])


def _top(counts: collections.Counter, fallback: Sequence[int] = ()) -> list[int]:
    """The TOP_K most frequent ids, topped up from ``fallback`` when fewer were seen."""
    best = [t for t, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_K]]
    return best + [t for t in fallback if t not in best][:TOP_K - len(best)]

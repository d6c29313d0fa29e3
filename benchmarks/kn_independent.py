"""An independent interpolated modified Kneser-Ney model, written from the papers, to check the project's.

Chen and Goodman (1998, "An empirical study of smoothing techniques for language modeling", TR-10-98,
section 3.5 and 4.1.6) and Heafield et al. (2013, "Scalable modified Kneser-Ney language model
estimation", KenLM's ``lmplz``), in plain Python dictionaries, sharing no code with
models/seq2seq/kneser_ney.py. For a history ``h`` of ``n - 1`` tokens and its suffix ``h'``::

    p(w | h) = max(a(hw) - D_n(a(hw)), 0) / sum_x a(hx) + gamma(h) p(w | h')
    gamma(h) = (D_n1 N1(h.) + D_n2 N2(h.) + D_n3+ N3+(h.)) / sum_x a(hx)

``a`` is the occurrence count at the highest order and the continuation count ``N1+(. hw)`` below it;
a history never seen passes the lower order through. Discounts per order from its count-of-counts
(``Y = n1 / (n1 + 2 n2)``, ``D_c = c - (c + 1) Y n_{c+1} / n_c``), half the count where they cannot be
estimated (a tiny text). The unigram level interpolates with the uniform distribution over the
vocabulary (KenLM's default), or, SRILM's and ``lmplz --interpolate_unigrams 0``'s way, gives what it
leaves to the unknown word ``<unk>`` (the project's OOV id).

The data are the project's own: the data preparation's split, Transform's vocabulary and OOV id
(benchmarks/text_kneser_ney.py's steps). The train text is read from the raw train windows (document,
window index, words), not from the transformed ones: each document's consecutive train windows give
its words in order, tokenized by the project's tokenizer and mapped through Transform's vocabulary.
Eval: each eval window's transformed context, top-5 as TFMA scores it (the label is in the top 5 when
fewer than 5 ids score higher).

    .venv/bin/python benchmarks/kn_independent.py /usr/share/common-licenses/GPL-3
    .venv/bin/python benchmarks/kn_independent.py FOLDER --text rebuilt   # the project's rebuilt train text

Results: docs/history/benchmarks-log.md ("An independent Kneser-Ney on the same splits").
"""
from __future__ import annotations

import argparse
import collections
import hashlib
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

TOP_K = 5
CONFIG = {"vocab_size": 4000, "context_tokens": 32, "target_tokens": 8}
RESERVED = 3          # <pad>, <s>, </s> head the vocabulary (models/seq2seq/features.py)
START = 1             # <s>, used as the sentence-start token when boundaries are marked
UNK = ("uniform", "leftover")
CACHE = (0.0, 0.05, 0.1, 0.2, 0.3)


# ----------------------------------------------------------------------------- the project's data


def prepare(source: str | None, work_dir: str) -> dict:
    """The project's split, vocabulary and windows for ``source``, as numpy arrays (cached in ``work_dir``)."""
    import stackenv  # noqa: F401  (before TensorFlow)

    import tensorflow as tf
    import tensorflow_transform as tft
    from seq2seq_quality import split_raw_records, transform

    from data.text import prepare_text_dataset
    from models.seq2seq import features, kneser_ney
    from models.seq2seq.preprocessing import tokenize

    root = Path(work_dir)
    manifest = prepare_text_dataset(source, root / "data", 16, 4, 2)
    key = hashlib.sha256(json.dumps([manifest.fingerprint, CONFIG]).encode()).hexdigest()[:12]
    cached = root / f"arrays-{key}.npz"
    if cached.exists():
        return dict(np.load(cached, allow_pickle=False))
    splits = split_raw_records(manifest)
    data = transform(splits, CONFIG, root / f"transformed-{key}")
    output = tft.TFTransformOutput(str(data / "transform"))
    vocabulary = [t.decode() if isinstance(t, bytes) else t
                  for t in output.vocabulary_by_name(features.VOCABULARY)]
    index = {token: i for i, token in enumerate(vocabulary)}
    oov = len(vocabulary)
    # The train text from the raw windows: per document, runs of consecutive window indices.
    runs: dict[str, dict[int, tuple[list[str], list[str]]]] = collections.defaultdict(dict)
    for record in splits["train"]:
        f = tf.train.Example.FromString(record).features.feature
        doc = f["document"].bytes_list.value[0].decode()
        number = int(f["example_id"].bytes_list.value[0].decode().rsplit("/", 1)[1])
        runs[doc][number] = (f["context"].bytes_list.value[0].decode().split(" "),
                             f["target"].bytes_list.value[0].decode().split(" "))
    stride = 2
    texts = []
    for doc in sorted(runs):          # any document order: n-grams never cross a document
        windows = runs[doc]
        numbers = sorted(windows)
        words: list[str] = []
        previous = None
        for number in numbers:
            context, target = windows[number]
            if previous is not None and number == previous + 1:
                words.extend((context + target)[-stride:])
            else:
                if words:
                    texts.append(words)
                words = context + target
            previous = number
        if words:
            texts.append(words)
    token_texts = []
    for words in texts:
        tokens = tokenize(tf.constant([" ".join(words)])).flat_values.numpy()
        token_texts.append(np.asarray([index.get(t.decode(), oov) for t in tokens], np.int64))
    stream = np.concatenate([np.r_[t, -1] for t in token_texts])
    eval_contexts, eval_targets = kneser_ney.read_windows(str(data / "eval" / "*"), CONFIG["context_tokens"],
                                                          CONFIG["target_tokens"])
    train_contexts, train_targets = kneser_ney.read_windows(str(data / "train" / "*"), CONFIG["context_tokens"],
                                                            CONFIG["target_tokens"])
    arrays = {"stream": stream, "eval_contexts": eval_contexts, "eval_labels": eval_targets[:, 0].astype(np.int64),
              "train_contexts": train_contexts, "train_targets": train_targets,
              "vocab_size": np.asarray(oov + 1), "rebuilt": kneser_ney.rebuild_sequences(train_contexts, train_targets)}
    root.mkdir(parents=True, exist_ok=True)
    np.savez(cached, **arrays)
    return arrays


def split_at(tokens, is_break) -> list[list[int]]:
    """The runs of ``tokens`` between the positions ``is_break(index, token)`` marks (empty runs dropped)."""
    out: list[list[int]] = []
    current: list[int] = []
    for index, token in enumerate(tokens):
        if is_break(index, token):
            if current:
                out.append(current)
            current = []
        else:
            current.append(token)
    if current:
        out.append(current)
    return out


def sequences(stream: np.ndarray) -> list[list[int]]:
    """A flat stream (-1 between sequences) as a list of token lists."""
    return split_at(stream.tolist(), lambda _, token: token < 0)


# ----------------------------------------------------------------------------- the estimator


def count_of_counts_discounts(counts) -> tuple[float, float, float]:
    """(D1, D2, D3+) from the count-of-counts n1..n4 (Chen and Goodman eq. 26: ``Y = n1 / (n1 + 2 n2)``,
    ``D_c = c - (c + 1) Y n_{c+1} / n_c``); each one the formula cannot give inside (0, c) (a zero
    count-of-counts on a tiny text) is half its count."""
    n = collections.Counter(min(int(c), 5) for c in counts)
    y = n[1] / (n[1] + 2 * n[2]) if n[1] + n[2] else None
    out = []
    for c in (1, 2, 3):
        d = c - (c + 1) * y * n[c + 1] / n[c] if y is not None and n[c] else None
        out.append(d if d is not None and 0 < d < c else c / 2)
    return out[0], out[1], out[2]


class KneserNey:
    """Interpolated modified Kneser-Ney of order ``order`` over token ``texts`` (lists of ids < ``vocab_size``).

    ``unk``: "uniform" (the unigram level interpolates with 1/V over the non-reserved ids, the OOV id
    among them: KenLM's default) or "leftover" (what the unigram level leaves goes to ``oov`` alone:
    SRILM, ``lmplz --interpolate_unigrams 0``). ``start``: each text begins with ``order - 1`` sentence
    starts (KenLM's ``<s>``, one more left neighbour for the grams that open a text); without them an
    n-gram's continuation count is the distinct tokens seen before it, so a gram only ever seen opening a
    text has none. A text too short for ``order`` keeps the orders it has. ``counted``: per text, one flag
    per token; only the n-grams that end at a flagged token are counted (a model of the events at word
    starts: the token that begins the next word, given the tokens before it); None counts them all.
    """

    def __init__(self, texts, order: int, vocab_size: int, oov: int, unk: str = "uniform", start: bool = False,
                 counted=None):
        self.V, self.oov, self.unk = vocab_size, oov, unk
        occurrences: collections.Counter = collections.Counter()
        left: dict = collections.defaultdict(set)   # the distinct tokens seen before each n-gram
        for t, text in enumerate(texts):
            seq = ([START] * (order - 1) if start else []) + list(text)
            flags = ([False] * (order - 1) if start else []) + (list(counted[t]) if counted else [True] * len(text))
            for i in range(len(seq)):
                if (seq[i] == START and start) or not flags[i]:
                    continue                         # <s> is never predicted; an uncounted event
                for n in range(1, min(order, i + 1) + 1):
                    gram = tuple(seq[i - n + 1:i + 1])
                    occurrences[gram] += 1
                    if i - n >= 0:
                        left[gram].add(seq[i - n])
        self.order = max((len(g) for g in occurrences), default=1)
        # a(g): occurrences at the top order and for n-grams that begin with <s>; below the top order the
        # continuation count N1+(. g), kept where it is not 0.
        self.a: list[dict] = [dict() for _ in range(self.order + 1)]
        for gram, c in occurrences.items():
            n = len(gram)
            value = c if n == self.order or (start and gram[0] == START) else len(left[gram])
            if value:
                self.a[n][gram] = value
        self.d = {n: count_of_counts_discounts(self.a[n].values()) for n in range(1, self.order + 1)}
        # Per history: the words seen after it, their discounted shares and gamma.
        self.rows: list[dict] = [dict() for _ in range(self.order + 1)]
        for n in range(1, self.order + 1):
            d1, d2, d3 = self.d[n]
            grouped = collections.defaultdict(list)
            for gram, c in self.a[n].items():
                grouped[gram[:-1]].append((gram[-1], c))
            for history, items in grouped.items():
                total = sum(c for _, c in items)
                words = np.asarray([w for w, _ in items], np.int64)
                cs = np.asarray([c for _, c in items], np.float64)
                ds = np.where(cs >= 3, d3, np.where(cs == 2, d2, d1))
                self.rows[n][history] = (words, np.maximum(cs - ds, 0) / total, ds.sum() / total)
        words, shares, gamma = self.rows[1][()]
        p1 = np.zeros(vocab_size)
        p1[words] = shares
        if unk == "leftover":
            p1[oov] += gamma
        else:
            uniform = np.zeros(vocab_size)
            uniform[RESERVED:] = 1.0
            p1 += gamma * uniform / uniform.sum()
        self.unigram = p1

    def distribution(self, history) -> np.ndarray:
        """p(. | history) over the vocabulary, ``history`` the preceding token ids (any length)."""
        p = self.unigram.copy()
        history = tuple(history)
        for n in range(2, self.order + 1):
            if len(history) < n - 1:
                break
            row = self.rows[n].get(history[len(history) - n + 1:])
            if row is None:
                break   # every longer history holds this one as its suffix: unseen too
            words, shares, gamma = row
            p *= gamma
            p[words] += shares
        return p


# ----------------------------------------------------------------------------- scoring


def top_hits(p: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Per row, 1.0 when fewer than TOP_K ids score higher than the label (TFMA's count)."""
    label_p = p[np.arange(len(labels)), labels]
    return ((p > label_p[:, None]).sum(axis=1) < TOP_K).astype(np.float64)


def cache_distribution(contexts: np.ndarray, vocab_size: int) -> np.ndarray:
    """The unigram distribution of each window's own (non-pad) context tokens."""
    out = np.zeros([len(contexts), vocab_size])
    for i, row in enumerate(contexts):
        ids = row[row != 0]
        np.add.at(out[i], ids, 1.0)
        out[i] /= max(len(ids), 1)
    return out


def distributions(model: KneserNey, contexts: np.ndarray) -> np.ndarray:
    """``[n, V]``: the model's next-token distribution after each right-padded context."""
    out = np.zeros([len(contexts), model.V])
    for i, row in enumerate(contexts):
        out[i] = model.distribution([int(t) for t in row if t != 0])
    return out


def cross_fitted(texts, orders, vocab_size: int, oov: int, folds: int = 5, context: int = 32, limit: int = 3000,
                 seed: int = 1) -> tuple[dict, np.ndarray, np.ndarray]:
    """Train positions, each scored by models of the rest of the train text (``folds`` contiguous blocks of
    its tokens); a word the rest never holds reads as OOV, in the context and as the label (the project's
    rule for a word the train split never held). Returns ({(order, unk): [n, V]}, cache [n, V], labels)."""
    flat = [(t, i) for t, text in enumerate(texts) for i in range(len(text))]
    fold_of = np.arange(len(flat)) * folds // len(flat)
    rng = np.random.default_rng(seed)
    kn: dict = collections.defaultdict(list)
    caches, labels = [], []
    for fold in range(folds):
        held = {position for position, f in zip(flat, fold_of) if f == fold}
        rest = [run for t, text in enumerate(texts)
                for run in split_at(text, lambda i, _, t=t: (t, i) in held)]
        seen = {token for text in rest for token in text}
        positions = sorted(position for position in held if position[1] >= 1)
        if len(positions) > limit // folds:
            positions = [positions[j] for j in sorted(rng.choice(len(positions), limit // folds, replace=False))]
        rows = np.zeros([len(positions), context], np.int64)
        for r, (t, i) in enumerate(positions):
            history = [w if w in seen else oov for w in texts[t][max(0, i - context):i]]
            rows[r, :len(history)] = history
            labels.append(texts[t][i] if texts[t][i] in seen else oov)
        for order in orders:
            for unk in UNK:
                kn[order, unk].append(distributions(KneserNey(rest, order, vocab_size, oov, unk), rows))
        caches.append(cache_distribution(rows, vocab_size))
    return {key: np.concatenate(value) for key, value in kn.items()}, np.concatenate(caches), np.asarray(labels)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", nargs="?", default=None, help="a folder of documents or one file (default: bundled)")
    p.add_argument("--work-dir", default="/tmp/kn-independent")
    p.add_argument("--orders", default="3,4,5")
    p.add_argument("--text", choices=("raw", "rebuilt"), default="raw",
                   help="the train text from the raw windows, or the project's rebuild of the transformed ones")
    args = p.parse_args(argv)
    data = prepare(args.source, args.work_dir)
    V = int(data["vocab_size"])
    oov = V - 1
    orders = [int(o) for o in args.orders.split(",")]
    texts = sequences(data["stream"] if args.text == "raw" else data["rebuilt"])
    contexts, labels = data["eval_contexts"].astype(np.int64), data["eval_labels"]
    cache = cache_distribution(contexts, V)
    print(f"{args.source or 'bundled'}: {sum(map(len, texts)):,} train tokens in {len(texts)} sequences ({args.text}); "
          f"{len(labels)} eval windows, OOV next word {np.mean(labels == oov):.3f}, V={V}", flush=True)
    # The choice on train: order, unknown word's treatment, cache weight (top-5, then the simpler model).
    kn_cf, cache_cf, labels_cf = cross_fitted(texts, orders, V, oov)
    chosen = {(order, unk, c): float(top_hits((1 - c) * kn_cf[order, unk] + c * cache_cf, labels_cf).mean())
              for order in orders for unk in UNK for c in CACHE}
    best = max(chosen, key=lambda key: (chosen[key], -key[0], -key[2]))
    print(f"  cross-fitted on {len(labels_cf):,} train positions: best KN-{best[0]} unk={best[1]} cache={best[2]} "
          f"({chosen[best]:.4f})", flush=True)
    results = {}
    for order in orders:
        for unk in UNK:
            for start in (False, True):
                kn = distributions(KneserNey(texts, order, V, oov, unk, start), contexts)
                for c in CACHE:
                    hits = top_hits((1 - c) * kn + c * cache, labels)
                    results[f"KN-{order}/{unk}/start={start}/cache={c}"] = float(hits.mean())
                    if (order, unk, c) == best and not start:
                        low, high = wilson(hits.mean(), len(hits))
                        print(f"  chosen on train, on eval: {hits.mean():.4f} [{low:.3f}, {high:.3f}]")
                print(f"  KN-{order} unk={unk:8} start={start!s:5}: " + " ".join(
                    f"c={c} {results[f'KN-{order}/{unk}/start={start}/cache={c}']:.4f}" for c in CACHE), flush=True)
    print(json.dumps({"source": args.source, "text": args.text, "chosen": list(best), "cross_fitted": chosen[best],
                      "eval": results}))


def wilson(p: float, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The 95% Wilson interval of a proportion ``p`` of ``n``."""
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


if __name__ == "__main__":
    main()

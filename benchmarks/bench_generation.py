"""Is the served text model's generated text better than its count model's? Judged by a model neither saw.

The gate compares next-word top-5 on eval windows; a user reads continuations. This benchmark makes the
two agree: it continues the same prompts with the served model (network and counts mixed as ``generate``
mixes them, for log-likelihood) and with its count part alone (the same SavedModel, the network's share
set to 0 and the others scaled up),
and scores every continuation under a held-out model, so that better numbers show as more plausible text.

- **The data** are a finished run's own eval split (Transform's eval windows, rebuilt into the text they
  were cut from): text no model of the run trained on. Its sequences are dealt alternately to two halves.
- **The held-out model** is an interpolated modified Kneser-Ney trigram written independently of the
  project (``kn_independent.KneserNey``), fitted on the first half.
- **The prompts** are the second half's windows: the context tokens before a position, and the tokens the
  text really goes on with (scored too: how plausible the true text is under the same judge).
- **The score** of a continuation is its mean log2-probability per token under the held-out model, each
  token given the prompt and the tokens generated before it (higher is better; 2 to the minus score is
  its perplexity). The served-minus-count difference is paired per prompt, with a 95 % interval.

Each continuation is generated twice per mode: greedy with the CLI's repetition rules (what ``generate``
does by default), and sampled (top-k 20, temperature 0.8, one seed per prompt).

    python -m pipeline run --model seq2seq --output /tmp/run          # any finished text run
    python benchmarks/bench_generation.py /tmp/run --prompts 300 --tokens 12

Results: docs/history/benchmarks-log.md ("Generated text judged by a held-out model").
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402  (puts the project on the path)

HELD_OUT_ORDER = 3
MODES = {"greedy (generate's defaults)": {},
         "sampled (top-k 20, temperature 0.8)": {"top_k": 20, "temperature": 0.8}}


def _latest(pattern: str) -> str:
    return C.latest_numbered(pattern, "pass the --output of a finished text run")


def eval_sequences(output: str) -> tuple[list[list[int]], list[str], int]:
    """The run's eval text as token-id sequences, the vocabulary (id -> token) and the context length."""
    import tensorflow_transform as tft

    from models.seq2seq import export, features, kneser_ney

    transform = f"{output}/tfx/seq2seq-pipeline/Transform"
    tft_output = tft.TFTransformOutput(_latest(f"{transform}/transform_graph/*"))
    spec = tft_output.transformed_feature_spec()
    context, target = spec[features.CONTEXT_XF].shape[0], spec[features.TARGET_XF].shape[0]
    examples = _latest(f"{transform}/transformed_examples/*")
    contexts, targets = kneser_ney.read_windows(f"{examples}/Split-eval/*", context, target)
    stream = kneser_ney.rebuild_sequences(contexts, targets)
    from kn_independent import sequences

    return sequences(np.where(stream == kneser_ney.BREAK, -1, stream)), export.vocabulary_tokens(tft_output), context


def prompts_from(texts: list[list[int]], context: int, tokens: int, count: int, oov: int,
                 rng: np.random.Generator) -> list[tuple[list[int], list[int]]]:
    """Up to ``count`` (prompt ids, true continuation ids) pairs: a full context before a position, and the
    ``tokens`` after it (no reserved id in either; unknown words, which a small vocabulary has many of, are
    kept: the judge scores them as its unknown id, and the prompt's text leaves them out)."""
    from kn_independent import RESERVED

    candidates = []
    for text in texts:
        for at in range(context, len(text) - tokens + 1, max(1, tokens)):
            prompt, truth = text[at - context:at], text[at:at + tokens]
            if all(t >= RESERVED for t in prompt + truth) and sum(t < oov for t in prompt) > context // 2:
                candidates.append((prompt, truth))
    picked = rng.permutation(len(candidates))[:count]
    return [candidates[i] for i in sorted(picked)]


def score(judge, prompt: list[int], continuation: list[int]) -> float:
    """Mean log2 p per token of ``continuation`` after ``prompt`` under ``judge``; -inf-safe."""
    history, total = list(prompt), 0.0
    for token in continuation:
        total += math.log2(max(float(judge.distribution(history)[token]), 1e-12))
        history.append(token)
    return total / max(1, len(continuation))


def generate(model, prompts: list[str], tokens: int, weights, mode: dict, seed: int) -> list[str]:
    from models.seq2seq.export import generate_request

    _drawn_from(model).assign(weights)
    signature = model.signatures["generate"]
    request = generate_request(prompts, signature.structured_input_signature[1], max_new_tokens=tokens,
                               seed=np.int64(seed), **{k: np.asarray(v, np.float32 if k == "temperature" else np.int32)
                                                       for k, v in mode.items()})
    return [text.decode() for text in signature(**request)["continuations"].numpy()]


def _drawn_from(model):
    """The mix variable ``generate`` reads: ``generate_weights`` (log-likelihood), or on an older export the served
    ``blend_weights`` (top-5)."""
    from models.seq2seq.export import generation_weights

    weights = generation_weights(model)
    return model.blend_weights if weights is None else weights


def paired_interval(differences: np.ndarray) -> tuple[float, float, float]:
    """Mean of ``differences`` and its 95 % t interval (normal quantile: hundreds of prompts)."""
    mean = float(differences.mean())
    half = 1.959964 * float(differences.std(ddof=1)) / math.sqrt(len(differences)) if len(differences) > 1 else math.inf
    return mean, mean - half, mean + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("output", help="--output of a finished text run (its serving dir and Transform output)")
    parser.add_argument("--prompts", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=12, help="tokens generated per prompt")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--examples", type=int, default=3, help="continuations printed side by side")
    parser.add_argument("--json-out", default=None, help="default: benchmarks/results/bench_generation.json")
    args = parser.parse_args()
    machine = C.machine_info()

    import stackenv  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

    import tensorflow as tf
    from kn_independent import KneserNey

    from artifacts.serving_dir import latest_version_dir
    from models.seq2seq import blend

    texts, vocabulary, context = eval_sequences(args.output)
    oov = len(vocabulary) - 1
    judge = KneserNey(texts[0::2], HELD_OUT_ORDER, len(vocabulary), oov)
    rng = np.random.default_rng(args.seed)
    pairs = prompts_from(texts[1::2], context, args.tokens, args.prompts, oov, rng)
    if len(pairs) < 2:
        sys.exit(f"{len(pairs)} prompts in the eval split's second half: too little eval text to judge")
    version = latest_version_dir(f"{args.output}/serving/seq2seq")
    if version is None:
        sys.exit(f"nothing pushed under {args.output}/serving/seq2seq: the run was not blessed")
    model = tf.saved_model.load(version)
    served = _drawn_from(model).numpy().copy()
    network = blend.COMPONENTS.index("network")
    counts_only = served.copy()
    counts_only[network] = 0.0
    counts_only = counts_only / counts_only.sum()
    index = {token: i for i, token in enumerate(vocabulary)}
    prompt_texts = [" ".join(vocabulary[t] for t in prompt if t != oov) for prompt, _ in pairs]
    truth = np.asarray([score(judge, prompt, real) for prompt, real in pairs])
    print(f"Run {args.output}: served version {os.path.basename(version)}, mix "
          f"{dict(zip(blend.COMPONENTS, np.round(served, 3).tolist()))}")
    print(f"Held-out judge: Kneser-Ney {HELD_OUT_ORDER}-gram on {sum(map(len, texts[0::2])):,} eval tokens; "
          f"{len(pairs)} prompts of {context} tokens from the other {sum(map(len, texts[1::2])):,}, "
          f"{args.tokens} tokens each")
    print(f"  the text's own continuation: {truth.mean():.3f} log2 p per token")
    results: dict = {"output": args.output, "version": version, "mix": served.tolist(), "prompts": len(pairs),
               "tokens": args.tokens, "truth": float(truth.mean()), "modes": {}}
    for name, mode in MODES.items():
        scored, samples = {}, {}
        for which, weights in (("served", served), ("counts alone", counts_only)):
            texts_out = generate(model, prompt_texts, args.tokens, weights, mode, args.seed)
            samples[which] = texts_out
            scored[which] = np.asarray([score(judge, prompt, [index.get(t, oov) for t in text.split()])
                                        for (prompt, _), text in zip(pairs, texts_out)])
        mean, low, high = paired_interval(scored["served"] - scored["counts alone"])
        identical = sum(a == b for a, b in zip(samples["served"], samples["counts alone"]))
        print(f"  {name}: served {scored['served'].mean():.3f}, counts alone {scored['counts alone'].mean():.3f}; "
              f"served - counts {mean:+.3f} [{low:+.3f}, {high:+.3f}] (95 %, paired); "
              f"{identical}/{len(pairs)} continuations identical")
        for i in range(min(args.examples, len(pairs))):
            print(f"    prompt  …{' '.join(prompt_texts[i].split()[-8:])}")
            for which in ("served", "counts alone"):
                print(f"      {which:13} {samples[which][i]}")
        results["modes"][name] = {"served": float(scored["served"].mean()),
                                  "counts_alone": float(scored["counts alone"].mean()),
                                  "difference": [mean, low, high], "identical": identical}
    _drawn_from(model).assign(served)
    C.write_json("bench_generation", results, args, machine)


if __name__ == "__main__":
    main()

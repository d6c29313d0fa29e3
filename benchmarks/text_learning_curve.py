"""How fast does the text network earn its place beside the counts? Held-out top-5 against training time.

The Trainer's step budget and the network's settings decide whether the served mix beats its count model
within the time a user waits. This benchmark measures that trade on a finished run's own windows, for
several settings one after the other, each trained for the same wall time:

- **The windows** are the run's Transform output. The train windows are split into fit and held-out blocks
  as the Trainer splits them (``holdout.labels`` in the order of the text), and the counts are the run's
  chosen Kneser-Ney model fitted on the fit windows only, as the Trainer's mix fit does (``_fit_blend``).
- **Each setting** builds the project's model (``build_seq2seq``) with the run's vocabulary and window
  lengths, and trains it on the fit windows in memory (batches of ``--batch-size``, shuffled).
- **At each checkpoint** (every ``--every`` seconds of training) it scores the network alone on the
  held-out windows the Trainer's mix fit uses, then chooses the network's share as the Trainer does
  (``blend.fit_network_share``: kept only when clearly better) and reports that mix's top-5 and its gain
  over the counts alone.

    python -m pipeline run --model seq2seq --data DIR --output RUN --train-steps 300   # any finished text run
    python benchmarks/text_learning_curve.py RUN --variants "dropout=0.5;dropout=0.2" --seconds 900 --every 300

Results: docs/history/benchmarks-log.md ("Text at a million words").
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as C  # noqa: E402  (puts the project on the path)

NAME = "text_learning_curve"


def _latest(pattern: str) -> str:
    return C.latest_numbered(pattern, "pass the --output of a finished text run")


def parse_variants(text: str) -> list[dict[str, Any]]:
    """``"dropout=0.5;dropout=0.2,units=128"`` -> one dict of model settings per variant."""
    from models.seq2seq.trainer import MODEL_DEFAULTS

    variants = []
    for part in filter(None, (piece.strip() for piece in text.split(";"))):
        variant: dict[str, Any] = {}
        for item in part.split(","):
            key, _, value = item.partition("=")
            key = key.strip()
            if key != "learning_rate" and key not in MODEL_DEFAULTS:
                sys.exit(f"unknown setting {key!r} in --variants; known: learning_rate, {', '.join(MODEL_DEFAULTS)}")
            kind = float if key == "learning_rate" else type(MODEL_DEFAULTS[key])
            variant[key] = kind(value)
        variants.append(variant)
    return variants


def windows(output: str) -> dict[str, Any]:
    """The run's fit and held-out windows (as the Trainer splits them) and the counts' held-out probabilities."""
    import tensorflow_transform as tft

    from models.seq2seq import baselines, blend, count_reference, features, holdout, kneser_ney

    transform = f"{output}/tfx/seq2seq-pipeline/Transform"
    tft_output = tft.TFTransformOutput(_latest(f"{transform}/transform_graph/*"))
    spec = tft_output.transformed_feature_spec()
    context, target = spec[features.CONTEXT_XF].shape[0], spec[features.TARGET_XF].shape[0]
    vocab = tft_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
    examples = _latest(f"{transform}/transformed_examples/*")
    train, evaluation = f"{examples}/Split-train/*", f"{examples}/Split-eval/*"
    fitted = baselines.fit_kneser_ney_reference(train, evaluation, vocab, context, target)
    if fitted.choice is None:
        sys.exit(f"the run's Kneser-Ney model could not be fitted ({fitted.scores.get('not_fitted')})")
    contexts, targets, starts = kneser_ney.read_windows_and_starts(train, context, target)
    label = np.empty(len(contexts), np.int8)
    label[fitted.text_order] = holdout.labels(len(contexts))
    fit, held = label == holdout.FIT, label == holdout.HOLDOUT
    stream, _, events = kneser_ney.rebuild_with_owners(contexts[fit], targets[fit],
                                                       starts=None if starts is None else starts[fit])
    held_out = count_reference.held_out_counts(stream, events, vocab, fitted.choice, contexts[held], targets[held],
                                               blend.MAX_FIT_WINDOWS)
    return {"vocab": vocab, "context": context, "target": target, "fit_contexts": contexts[fit],
            "fit_targets": targets[fit], "held_contexts": held_out.contexts, "held_labels": held_out.labels,
            "held_counts": held_out.counts, "shares": fitted.choice.shares(),
            "description": fitted.scores.get("description", "")}


def train_curve(data: dict[str, Any], variant: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Train one variant for ``args.seconds`` of training; a checkpoint every ``args.every`` seconds."""
    import tensorflow as tf

    from models.seq2seq import blend, features
    from models.seq2seq.model import build_seq2seq, teacher_forcing
    from models.seq2seq.trainer import MODEL_DEFAULTS

    tf.keras.utils.set_random_seed(args.seed)
    settings = {**MODEL_DEFAULTS, **{k: v for k, v in variant.items() if k != "learning_rate"}}
    targets = data["fit_targets"].astype(np.int64)
    # Transform's decoder input: START, then the target shifted right; padding where the target pads.
    decoder = np.concatenate([np.full([len(targets), 1], features.START_ID, np.int64), targets[:, :-1]], axis=1)
    decoder[targets == features.PAD_ID] = features.PAD_ID
    dataset = tf.data.Dataset.from_tensor_slices(
        ({features.CONTEXT_XF: data["fit_contexts"].astype(np.int64), features.DECODER_INPUT_XF: decoder}, targets))
    dataset = teacher_forcing(dataset.shuffle(len(targets), seed=args.seed).repeat()
                              .batch(args.batch_size, drop_remainder=True)).prefetch(2)
    model = build_seq2seq(data["vocab"], data["context"], data["target"],
                          float(variant.get("learning_rate", args.learning_rate)), **settings)
    batches = iter(dataset)
    curve, steps, trained, next_check = [], 0, 0.0, args.every
    while trained < args.seconds:
        started = time.perf_counter()
        for _ in range(args.steps_per_timing):
            model.train_on_batch(*next(batches))
        steps += args.steps_per_timing
        trained += time.perf_counter() - started
        if trained < next_check and trained < args.seconds:
            continue
        next_check += args.every
        network = np.concatenate([
            tf.nn.softmax(model.next_token_logits(tf.constant(data["held_contexts"][start:start + 512]))).numpy()
            for start in range(0, len(data["held_contexts"]), 512)])
        weights, record = blend.fit_network_share(network, data["held_counts"], data["held_labels"], data["shares"])
        point = {"train_seconds": round(trained, 1), "steps": steps, "network": record["components"]["network"]["top5"],
                 "counts": record["components"]["counts"]["top5"], "share": weights["network"],
                 "mix": record["mix"]["top5"]}
        point["gain"] = point["mix"] - point["counts"]
        C.log(f"  {variant}: {trained:7.0f} s, {steps:6d} steps: network alone {point['network']:.4f}, counts "
              f"{point['counts']:.4f}, served mix (network {point['share']:.1f}) {point['mix']:.4f} "
              f"({point['gain']:+.4f})")
        curve.append(point)
    return curve


def main() -> None:
    parser = C.base_parser(__doc__)
    parser.add_argument("output", help="--output of a finished text run (its Transform output)")
    parser.add_argument("--variants", default="dropout=0.5;dropout=0.2",
                        help="';'-separated settings to compare, each a ','-separated list of KEY=VALUE "
                             "(MODEL_DEFAULTS keys and learning_rate)")
    parser.add_argument("--seconds", type=float, default=900, help="training time per variant")
    parser.add_argument("--every", type=float, default=300, help="training time between checkpoints")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=3e-3)
    parser.add_argument("--steps-per-timing", type=int, default=50, help="steps between clock reads")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.every, args.steps_per_timing = 2.0, 1.0, 5
    variants = parse_variants(args.variants)
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)

    import stackenv  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow)

    data = windows(args.output)
    C.log(f"Run {args.output}: {len(data['fit_targets']):,} fit windows, {len(data['held_labels']):,} held-out "
          f"windows scored; counts: {data['description']}")
    curves = [{"variant": variant, "curve": train_curve(data, variant, args)} for variant in variants]
    C.write_json(NAME, {"fit_windows": int(len(data["fit_targets"])), "held_out_windows": int(len(data["held_labels"])),
                        "counts": data["description"], "curves": curves}, args, machine)


if __name__ == "__main__":
    main()

"""The CNN's in-memory fit with one step per Keras call against ``regime.STEPS_PER_EXECUTION`` per call.

What a default Trainer run does after loading its splits (models/cnn/trainer.py): the reference predictors
fit in a thread beside the CNN (``references.beside``), and ``regime.fit_with_holdout`` trains with the
defaults (step budget, held-out checks, early stopping) under MirroredStrategy. The two variants differ only
in ``compile(steps_per_execution=...)``, so they train the same steps on the same batches: the script checks
that both end on the same held-out accuracy and step count, and prints the seconds of each, rounds
interleaved in one process (the order swapped each round), and the paired ratio.

The data: ``N`` train and 10,000 eval 28x28 digits built as ``bench_tfx_example.py`` builds them,
standardised per pixel as Transform does.

    .venv/bin/python benchmarks/bench_steps_per_call.py                 # 40,000 digits, 2 rounds (~2 min)
    .venv/bin/python benchmarks/bench_steps_per_call.py --images 160000 --rounds 3
    .venv/bin/python benchmarks/bench_steps_per_call.py --quick         # 2,000 digits, 1 round
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_steps_per_call"
EVAL_IMAGES = 10_000


def standardised_digits(images: int):
    """``images`` train and ``EVAL_IMAGES`` eval digits as the Trainer holds them: (xt, yt, xe, ye),
    pixels standardised per pixel with the train part's statistics, as Transform does."""
    import numpy as np
    from bench_tfx_example import digit_pixels

    from models.cnn import preprocessing

    pixels, labels = digit_pixels(images + EVAL_IMAGES)
    x = pixels.reshape(len(pixels), -1).astype(np.float32) / 255.0
    train = x[:images]
    x = (x - train.mean(0)) / np.maximum(train.std(0), preprocessing.STD_FLOOR)
    return x[:images], labels[:images], x[images:], labels[images:]


def main(argv=None) -> int:
    p = C.base_parser(__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=40_000, help="train digits")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        args.images, args.rounds = 2_000, 1
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)

    import stackenv  # noqa: F401  (the project's TF environment, before TensorFlow loads)

    import tensorflow as tf

    from models.cnn import features
    from models.cnn.hparams import CnnHyperparameters
    from models.cnn.model import build_cnn
    from models.common import references, regime
    from models.common.distribution import make_strategy

    xt, yt, xe, ye = standardised_digits(args.images)
    strategy = make_strategy("mirrored")
    hparams = CnnHyperparameters()
    variants = {"one step per call": 1, f"{regime.STEPS_PER_EXECUTION} steps per call": regime.STEPS_PER_EXECUTION}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    outcome: dict[str, tuple[int, float | None]] = {}

    def fit(steps_per_execution: int) -> tuple[int, float | None]:
        tf.keras.utils.set_random_seed(42)
        fitting = references.beside(references.classifier_references, xt, yt, xe, ye, 42)

        def build():
            with strategy.scope():
                return build_cnn([28, 28, 1], 10, 1e-3, hparams, steps_per_execution=steps_per_execution)

        _, report = regime.fit_with_holdout(
            build, {features.IMAGE_XF: xt}, yt, batch_size=64, min_steps=hparams.min_steps, max_steps=10**9,
            patience_steps=hparams.patience_steps, holdout_fraction=hparams.holdout_fraction, num_classes=10,
            seed=42)
        fitting.result()
        return report.epochs_run * report.steps_per_epoch, report.holdout_accuracy

    for round_index in range(args.rounds):
        for name in C.rotated(list(variants), round_index):
            started = C.now()
            outcome[name] = fit(variants[name])
            seconds[name].append(C.now() - started)
            C.log(f"round {round_index + 1}, {name}: {seconds[name][-1]:.1f} s, {outcome[name][0]} steps, "
                  f"held-out accuracy {outcome[name][1]}")
    one, many = variants
    same = outcome[one] == outcome[many]
    C.print_table(["variant", "seconds per round", "median", "steps", "held-out accuracy"],
                  [[name, ", ".join(f"{s:.1f}" for s in seconds[name]), C.median(seconds[name]), *outcome[name]]
                   for name in variants],
                  title=f"The in-memory fit on {args.images:,} digits, references beside it, {args.rounds} rounds")
    print(f"{many} / {one}: paired ratio {C.paired_ratio(seconds[many], seconds[one]):.2f}; "
          f"same steps and held-out accuracy: {'yes' if same else 'NO'}")
    C.write_json(NAME, {"seconds": seconds, "outcome": outcome, "same_training": same}, args, machine)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

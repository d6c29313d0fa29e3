"""The CNN's in-memory fit with translate+zoom as one resample against Keras' two layers.

What a default Trainer run does after loading its splits (models/cnn/trainer.py): the reference predictors
fit in a thread beside the CNN (``references.beside``), and ``regime.fit_with_holdout`` trains under
MirroredStrategy with the held-out checks. The variants differ only in the augmentation layers:
``RandomShiftZoom`` (models/cnn/shift_zoom.py, the default) or Keras' ``RandomTranslation`` then
``RandomZoom`` (as before it, ``cnn_fastloop._with_two_resamples``). Both train the same number of steps
(``--steps``, early stopping held back), so the seconds compare like for like; rounds are interleaved in one
process (the order swapped each round) and the paired ratio printed, with each variant's held-out accuracy.
Accuracy on real image sets, over many splits: ``cnn_fastloop.py --variants auto,auto_two_resamples``.

The data: ``N`` train and 10,000 eval 28x28 digits built as ``bench_tfx_example.py`` builds them,
standardised per pixel as Transform does.

    .venv/bin/python benchmarks/bench_shift_zoom.py                 # 50,000 digits, 1,122 steps, 2 rounds
    .venv/bin/python benchmarks/bench_shift_zoom.py --quick         # 2,000 digits, 64 steps, 1 round
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import _common as C  # noqa: E402

NAME = "bench_shift_zoom"


def main(argv=None) -> int:
    p = C.base_parser(__doc__.split("\n")[0])
    p.add_argument("--images", type=int, default=50_000, help="train digits")
    p.add_argument("--steps", type=int, default=1122, help="steps each fit trains (a default run at 50,000)")
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args(argv)
    if args.quick:
        args.images, args.steps, args.rounds = 2_000, 64, 1
    machine = C.machine_info()
    C.print_header(NAME, machine, args.quick)

    import stackenv  # noqa: F401  (the project's TF environment, before TensorFlow loads)

    import tensorflow as tf
    from bench_steps_per_call import standardised_digits
    from cnn_fastloop import _with_two_resamples

    from models.cnn import features
    from models.cnn.hparams import CnnHyperparameters
    from models.cnn.model import build_cnn
    from models.common import references, regime
    from models.common.distribution import make_strategy

    xt, yt, xe, ye = standardised_digits(args.images)
    strategy = make_strategy("mirrored")
    hparams = CnnHyperparameters()

    def build():
        with strategy.scope():
            return build_cnn([28, 28, 1], 10, 1e-3, hparams, steps_per_execution=regime.STEPS_PER_EXECUTION)

    variants = {"one resample (RandomShiftZoom)": build, "two resamples (Keras' pair)": _with_two_resamples(build)}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    accuracy: dict[str, list[float | None]] = {name: [] for name in variants}

    def fit(builder) -> tuple[int, float | None]:
        tf.keras.utils.set_random_seed(42)
        fitting = references.beside(references.classifier_references, xt, yt, xe, ye, 42)
        _, report = regime.fit_with_holdout(
            builder, {features.IMAGE_XF: xt}, yt, batch_size=64, min_steps=args.steps, max_steps=args.steps,
            patience_steps=hparams.patience_steps, holdout_fraction=hparams.holdout_fraction, num_classes=10,
            seed=42)
        fitting.result()
        return report.epochs_run * report.steps_per_epoch, report.holdout_accuracy

    for round_index in range(args.rounds):
        for name in C.rotated(list(variants), round_index):
            started = C.now()
            steps, held_out = fit(variants[name])
            seconds[name].append(C.now() - started)
            accuracy[name].append(held_out)
            C.log(f"round {round_index + 1}, {name}: {seconds[name][-1]:.1f} s, {steps} steps, "
                  f"held-out accuracy {held_out}")
    one, two = variants
    C.print_table(["variant", "seconds per round", "median", "held-out accuracy per round"],
                  [[name, ", ".join(f"{s:.1f}" for s in seconds[name]), C.median(seconds[name]),
                    ", ".join(f"{a:.4f}" for a in accuracy[name] if a is not None)] for name in variants],
                  title=f"The in-memory fit on {args.images:,} digits, {args.steps} steps, references beside it")
    print(f"{one} / {two}: paired ratio {C.paired_ratio(seconds[one], seconds[two]):.2f}")
    C.write_json(NAME, {"seconds": seconds, "held_out_accuracy": accuracy}, args, machine)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The fast loop: the CNN's model functions trained directly on numpy arrays, next to the
reference predictors, on the digits and the real image sets (benchmarks/image_sets.py).

No TFX here: it exists to choose the CNN's defaults (architecture, augmentation, class
weights, training length) in minutes before they are wired into the pipeline, where
benchmarks/bench_images.py measures them end to end. Data is prepared as the pipeline does
(alpha composited on white, resized to --image-size, 3 channels; the digits 8x8x1) and
standardised per pixel with the train split's statistics, as Transform does. Splits are
random 80/20 per --seeds.

    python benchmarks/cnn_fastloop.py --sets-dir /tmp/image-sets --variants plain,plain_aug
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import stackenv  # noqa: E402,F401  (tf-keras before TensorFlow)

VARIANTS = {
    "plain": {"augment": ()},
    "plain_aug": {"augment": ("translate", "zoom")},
    "plain_noweights": {"class_weights": "off"},
    "two_conv_dense": {"convs_per_block": 2, "dense_units": 128},
    "filters32_aug": {"filters": 32, "augment": ("translate", "zoom")},
    "auto": {},
    # The augmentation before translate and zoom became one resample (models/cnn/shift_zoom.py):
    # Keras' RandomTranslation then RandomZoom, two resamples of each image.
    "auto_two_resamples": {"_two_resamples": True},
    # Candidates for small sets (benchmark-side only until they measure better):
    # refit: after early stopping picked the length on the held-out 15%, train a fresh model on
    # all of train for that many passes; ensemble: average the softmax of the models trained
    # without and with class weights (both exist anyway where classes are imbalanced);
    # membersN: the softmax of N models averaged, each with its own seed and held-out part.
    # Results: benchmarks/README.md, "Icons over five splits".
    "refit": {"_refit": True},
    "ensemble": {"_ensemble": True},
    "ensemble_refit": {"_ensemble": True, "_refit": True},
    "filters32": {"filters": 32},
    "members3": {"_members": 3},
    "members3_off": {"_members": 3, "class_weights": "off"},
    "noaug": {"augment": ()},
    "strong_aug": {"augment_strength": 0.2},
    "dense128": {"dense_units": 128},
    "blocks2": {"max_blocks": 2},
    "kernel_off": {"kernel_head": "off"},
    "kernel_on": {"kernel_head": "on"},
    "wide": {"filters": 32, "convs_per_block": 2, "dense_units": 128, "dropout": 0.3},
}
STD_FLOOR = 0.05  # as models/cnn/preprocessing.py


def load_digits():
    from sklearn.datasets import load_digits as sk_digits

    d = sk_digits()
    x = np.rint(np.clip(d.images, 0, 16) * 255.0 / 16.0).astype(np.uint8)[..., None]
    return x, d.target.astype(np.int64), [str(i) for i in range(10)]


def load_folder(root: Path, size: int, channels: int = 3):
    from PIL import Image

    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    xs, ys = [], []
    for label, name in enumerate(classes):
        for path in sorted((root / name).glob("*.png")):
            img = Image.open(path)
            img = img.convert("RGBA")
            img = Image.alpha_composite(Image.new("RGBA", img.size, (255, 255, 255, 255)), img)
            img = img.convert("RGB" if channels == 3 else "L").resize((size, size), Image.BILINEAR)
            arr = np.asarray(img, np.uint8)
            xs.append(arr if arr.ndim == 3 else arr[..., None])
            ys.append(label)
    return np.stack(xs), np.asarray(ys, np.int64), classes


def standardise(train: np.ndarray, *others: np.ndarray):
    flat = train.reshape(len(train), -1).astype(np.float32) / 255.0
    mean, std = flat.mean(0), np.maximum(flat.std(0), STD_FLOOR)
    return [((a.reshape(len(a), -1).astype(np.float32) / 255.0) - mean) / std for a in (train, *others)]


def shifted_views(images: np.ndarray) -> list[np.ndarray]:
    """Copies of the images shifted by 1/16 of the side up, down, left and right (edges repeated),
    for test-time augmentation: the softmax averaged over the image and these."""
    from scipy import ndimage

    step = max(1, images.shape[1] // 16)
    return [ndimage.shift(images, (0, *shift, 0), order=0, mode="nearest")
            for shift in ((step, 0), (-step, 0), (0, step), (0, -step))]


def _scores(probabilities: np.ndarray, labels: np.ndarray, prefix: str = "") -> dict:
    pred = probabilities.argmax(1)
    recalls = [np.mean(pred[labels == c] == c) for c in np.unique(labels)]
    return {f"{prefix}accuracy": round(float(np.mean(pred == labels)), 4),
            f"{prefix}balanced_accuracy": round(float(np.mean(recalls)), 4)}


def _with_two_resamples(build):
    """``build`` with translate+zoom as Keras' two layers, as before shift_zoom.py (seeds as then)."""
    import tensorflow as tf

    from models.cnn import model as cnn_model

    def pair(factor, seed=0):
        layers = tf.keras.layers
        return tf.keras.Sequential([layers.RandomTranslation(factor, factor, fill_mode="nearest", seed=seed - 4),
                                    layers.RandomZoom(factor, fill_mode="nearest", seed=seed - 3)])

    def built():
        fused, cnn_model.RandomShiftZoom = cnn_model.RandomShiftZoom, pair
        try:
            return build()
        finally:
            cnn_model.RandomShiftZoom = fused
    return built


def run_set(name, x, y, variants, seed, log, args_max_steps=2000):
    import tensorflow as tf

    from models.cnn import features, kernel_head
    from models.cnn.hparams import CnnHyperparameters
    from models.cnn.model import build_cnn
    from models.common import references, regime

    rng = np.random.RandomState(seed)
    order = rng.permutation(len(y))
    cut = int(0.8 * len(y))
    tr, ev = order[:cut], order[cut:]
    xt, xe, *xe_shifted = standardise(x[tr], x[ev], *shifted_views(x[ev]))
    yt, ye = y[tr], y[ev]
    result = {"set": name, "seed": seed, "train": len(tr), "eval": len(ev), "shape": list(x.shape[1:])}
    t = time.monotonic()
    result["references"] = references.classifier_references(xt, yt, xe, ye, seed=seed)
    result["references_s"] = round(time.monotonic() - t, 1)
    log(f"{name} seed {seed}: references {result['references']} ({result['references_s']} s)")
    num_classes = int(y.max()) + 1
    for variant in variants:
        options = {k: v for k, v in VARIANTS[variant].items() if not k.startswith("_")}
        refit, ensemble = VARIANTS[variant].get("_refit"), VARIANTS[variant].get("_ensemble")
        hp = CnnHyperparameters(**options)
        tf.keras.utils.set_random_seed(seed)
        t = time.monotonic()
        build = lambda: build_cnn(x.shape[1:], num_classes, 1e-3, hp)  # noqa: E731
        if VARIANTS[variant].get("_two_resamples"):
            build = _with_two_resamples(build)
        fit = lambda mode, member=0: regime.fit_with_holdout(  # noqa: E731
            build, {features.IMAGE_XF: xt}, yt,
            batch_size=64, min_steps=hp.min_steps, max_steps=args_max_steps, patience_steps=hp.patience_steps,
            holdout_fraction=hp.holdout_fraction, class_weights=mode,
            num_classes=num_classes, seed=seed + 1000 * member)
        members = VARIANTS[variant].get("_members", 1)
        fits = ([fit("off"), fit("on")] if ensemble
                else [fit(hp.class_weights, member) for member in range(members)])
        fit_seeds = [seed] * len(fits) if ensemble else [seed + 1000 * member for member in range(members)]
        probabilities = shifted = 0.0
        heads = []
        for (model, report), fit_seed in zip(fits, fit_seeds):
            if not refit:  # as the Trainer: the kernel head where the held-out part prefers it
                fit_idx, held_idx = regime.holdout_split(yt, hp.holdout_fraction, fit_seed)
                model, head = kernel_head.fit_and_select(
                    model, xt, yt, fit_idx, held_idx, num_classes, report.holdout_accuracy,
                    mode=hp.kernel_head, seed=seed)
                heads.append(head.to_dict())
            if refit:
                weights = regime.balanced_class_weights(yt, num_classes) if report.class_weights else None
                fit_size = len(yt) - report.holdout_examples
                steps = int(round(report.best_epoch * report.steps_per_epoch * len(yt) / max(1, fit_size)))
                model = build()
                data = regime._dataset({features.IMAGE_XF: xt}, yt, 64, True, seed)
                model.fit(data, epochs=1, steps_per_epoch=steps, class_weight=weights, verbose=0)
            probabilities = probabilities + model.predict(xe, verbose=0, batch_size=256)
            for view in xe_shifted:
                shifted = shifted + model.predict(view, verbose=0, batch_size=256)
        result[variant] = {**_scores(probabilities, ye), **_scores(probabilities + shifted, ye, "tta_"),
                           "wall_s": round(time.monotonic() - t, 1), **report.to_dict(),
                           "kernel_heads": heads}
        log(f"{name} seed {seed} {variant}: {result[variant]}")
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sets-dir", default="/tmp/image-sets")
    p.add_argument("--sets", default="digits,glyphs,icons")
    p.add_argument("--variants", default="plain,plain_aug")
    p.add_argument("--seeds", default="0")
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--max-steps", type=int, default=2000)
    p.add_argument("--out", default=None, help="JSON results file")
    args = p.parse_args(argv)
    log = lambda m: print(m, flush=True)  # noqa: E731
    results = []
    for name in args.sets.split(","):
        if name == "digits":
            x, y, _ = load_digits()
        else:
            x, y, _ = load_folder(Path(args.sets_dir) / name, args.image_size)
        for seed in (int(s) for s in args.seeds.split(",")):
            results.append(run_set(name, x, y, args.variants.split(","), seed, log, args.max_steps))
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()

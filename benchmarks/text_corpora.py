"""The served text model against the bigram reference on corpora nobody here wrote.

For each corpus (Debian's own prose on this machine: a license, the Python policy, the Vim
user manual, package READMEs; from one file of ~3k words to a folder of ~100k), the
pipeline's steps without its orchestration (benchmarks/seq2seq_quality.py: the data
preparation's split, Transform on train, the real ``run_fn``), then the exported
``serving_default`` scored on the held-out windows as TFMA scores them, next to the
bigram reference computed here from the transformed windows (models/seq2seq/baselines.py)
and the interpolated trigram of the train counts alone (models/seq2seq/ngram.py), with the
95% Wilson interval the run summary prints (models/common/intervals.py), a 95% bootstrap
interval of the paired difference served - bigram over the same eval windows (is the gain
real?), and one generated continuation per corpus. Nothing is tuned on the eval windows.

    .venv/bin/python benchmarks/text_corpora.py                       # every corpus
    .venv/bin/python benchmarks/text_corpora.py --only gpl2 --max-steps 300

Results: benchmarks/README.md ("Text corpora").
"""
from __future__ import annotations

import argparse
import glob
import gzip
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import stackenv  # noqa: F401,E402  (before TensorFlow)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from seq2seq_quality import split_raw_records, transform  # noqa: E402

from data.text import prepare_text_dataset  # noqa: E402
from models.common import intervals  # noqa: E402
from models.common.training import TrainingSettings  # noqa: E402
from models.seq2seq import blend, features, ngram  # noqa: E402
from models.seq2seq.baselines import ngram_baselines  # noqa: E402
from models.seq2seq.export import generate_request  # noqa: E402

MIN_WORDS = 50  # files shorter than this are left out of a corpus folder
#: name -> (kind, glob of source files). Gzipped files are decompressed into the corpus folder.
CORPORA = {
    "gpl2": ("license, one file", "/usr/share/common-licenses/GPL-2"),
    "python-policy": ("technical policy, one file", "/usr/share/doc/python3/python-policy.txt.gz"),
    "vim-usr-01-05": ("user manual, 5 chapters", "/usr/share/vim/vim90/doc/usr_0[1-5].txt"),
    "doc-readmes": ("package READMEs, many short files", "/usr/share/doc/*/README*"),
    "vim-usr-all": ("user manual, 36 chapters", "/usr/share/vim/vim90/doc/usr_*.txt"),
}


def build_corpus(name: str, pattern: str, root: Path) -> Path | None:
    """A folder of .txt copies of ``pattern``'s files (None when none exists on this machine)."""
    target = root / "corpora" / name
    files = sorted(f for f in glob.glob(pattern) if os.path.isfile(f))
    if not files:
        return None
    target.mkdir(parents=True, exist_ok=True)
    for path in files:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        if len(text.split()) < MIN_WORDS:  # a stub README: not prose, and shorter than one window
            continue
        stem = path.strip("/").replace("/", "_").removesuffix(".gz")
        (target / f"{stem}.txt").write_text(text, encoding="utf-8")
    return target


def score_export(export_dir: str, eval_records: list[bytes], tables: ngram.NgramTables,
                 batch: int = 512) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-window top-5 hit (0/1) of ``serving_default`` and of the bigram reference, and whether the label is
    the OOV id (a word the train split never held), labels as TFMA reads them.

    The reference's hits come from ``tables``' bigram distribution, the train counts' (it ranks
    exactly as baselines.py; its mean is printed beside ngram_baselines' to show it).
    """
    model = tf.saved_model.load(export_dir)
    serve, labels_fn = model.signatures["serving_default"], model.signatures["transform_features"]
    hits, reference, unknown = [], [], []
    for start in range(0, len(eval_records), batch):
        chunk = tf.constant(eval_records[start:start + batch])
        probabilities = serve(examples=chunk)["probabilities"].numpy()
        transformed = labels_fn(examples=chunk)
        labels = transformed[features.NEXT_TOKEN_XF].numpy()
        hits.extend(blend.hits(probabilities, labels).tolist())
        bigram = tables.probabilities(transformed[features.CONTEXT_XF])["bigram"].numpy()
        reference.extend(blend.hits(bigram, labels).tolist())
        unknown.extend((labels >= tables.vocab_size - features.NUM_OOV_BUCKETS).tolist())
    return np.asarray(hits, np.float64), np.asarray(reference, np.float64), np.asarray(unknown, bool)


def trigram_top5(tables: ngram.NgramTables, eval_glob: str) -> float:
    """Eval top-5 of the interpolated trigram of the train counts alone (``tables``)."""
    spec = {features.CONTEXT_XF: tf.io.FixedLenFeature([32], tf.int64),
            features.NEXT_TOKEN_XF: tf.io.FixedLenFeature([], tf.int64)}
    found = []
    for batch in tf.data.TFRecordDataset(tf.io.gfile.glob(eval_glob), compression_type="GZIP").batch(512):
        parsed = tf.io.parse_example(batch, spec)
        interpolated = tables.probabilities(parsed[features.CONTEXT_XF])["interpolated"].numpy()
        found.append(blend.hits(interpolated, parsed[features.NEXT_TOKEN_XF].numpy()))
    return float(np.concatenate(found).mean())


def prompt_of(eval_records: list[bytes]) -> str:
    """The context of the middle eval window: text the model has not trained on."""
    from data import text_features
    example = tf.train.Example.FromString(eval_records[len(eval_records) // 2])
    return example.features.feature[text_features.CONTEXT].bytes_list.value[0].decode()


def repeated_trigrams(text: str) -> int:
    words = text.split()
    grams = [tuple(words[i:i + 3]) for i in range(len(words) - 2)]
    return len(grams) - len(set(grams))


def bootstrap(values: np.ndarray, draws: int = 1000, seed: int = 0) -> tuple[float, float]:
    rng = np.random.RandomState(seed)
    means = values[rng.randint(0, len(values), size=(draws, len(values)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def run_corpus(name: str, folder: Path, args, root: Path) -> dict:
    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.seq2seq.trainer import run_fn

    manifest = prepare_text_dataset(str(folder), root / "data", 16, 4, 2)
    config = {"vocab_size": 4000, "context_tokens": 32, "target_tokens": 8}
    key = hashlib.sha256(json.dumps([manifest.fingerprint, config]).encode()).hexdigest()[:12]
    splits = split_raw_records(manifest)
    data = transform(splits, config, root / f"transformed-{name}-{key}")
    train_glob, eval_glob = str(data / "train" / "*"), str(data / "eval" / "*")
    reference = ngram_baselines(train_glob, eval_glob)
    n_train = len(splits["train"])
    steps = min(args.max_steps, args.epochs * math.ceil(n_train / 64))
    settings = TrainingSettings(batch_size=64, learning_rate=3e-3, epochs=args.epochs, seed=42)
    run_dir = root / f"run-{name}-{time.strftime('%H%M%S')}"
    fn_args = FnArgs(train_files=[train_glob], eval_files=[eval_glob], train_steps=steps,
                     eval_steps=1, transform_output=str(data / "transform"),
                     transform_graph_path=str(data / "transform"), serving_model_dir=str(run_dir / "serving"),
                     model_run_dir=str(run_dir / "logs"), custom_config=settings.to_custom_config())
    started = time.monotonic()
    run_fn(fn_args)
    seconds = time.monotonic() - started
    import tensorflow_transform as tft

    vocab_size = (tft.TFTransformOutput(str(data / "transform")).vocabulary_size_by_name(features.VOCABULARY)
                  + features.NUM_OOV_BUCKETS)
    tables = ngram.NgramTables(ngram.fit_tables(ngram.read_events(train_glob, config["context_tokens"]), vocab_size))
    hits, reference_hits, unknown = score_export(fn_args.serving_model_dir, splits["eval"], tables)
    trigram = trigram_top5(tables, eval_glob)
    with open(run_dir / "serving" / "assets.extra" / "training.json") as handle:
        training = json.load(handle)
    model = tf.saved_model.load(fn_args.serving_model_dir)
    generated = model.signatures["generate"](**generate_request(
        [prompt_of(splits["eval"])], max_new_tokens=24))["continuations"].numpy()[0].decode()
    net = training["blend"].get("components", {}).get("network", {}).get("top5")
    return {"corpus": name, "words": manifest.extra["num_words"], "documents": manifest.extra["num_documents"],
            "train": n_train, "eval": len(splits["eval"]), "bigram": reference["bigram_top5"],
            "served": float(hits.mean()), "interval": intervals.wilson(float(hits.mean()), len(hits)),
            "bigram_from_export": float(reference_hits.mean()), "trigram": trigram,
            "gain": float((hits - reference_hits).mean()), "gain_interval": bootstrap(hits - reference_hits),
            "oov_labels": float(unknown.mean()), "served_known": float(hits[~unknown].mean()),
            "bigram_known": float(reference_hits[~unknown].mean()), "network_holdout": net,
            "weights": training["blend"]["weights"], "best_epoch": training["best_epoch"],
            "epochs_run": training["epochs_run"], "steps": steps, "seconds": seconds, "sample": generated,
            "repeated_trigrams": repeated_trigrams(generated)}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", default="/tmp/text-corpora")
    p.add_argument("--only", nargs="*", default=None)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--max-steps", type=int, default=3000, help="training steps at most per corpus (CPU time)")
    args = p.parse_args(argv)
    root = Path(args.work_dir)
    rows = []
    for name, (kind, pattern) in CORPORA.items():
        if args.only and name not in args.only:
            continue
        folder = build_corpus(name, pattern, root)
        if folder is None:
            print(f"{name}: no {pattern} on this machine, skipped")
            continue
        row = run_corpus(name, folder, args, root)
        row["kind"] = kind
        rows.append(row)
        print(json.dumps(row), flush=True)
    print()
    print("| corpus | kind | words | train / eval windows | bigram top-5 | trigram top-5 | served top-5 [95% CI] "
          "| served - bigram [95% CI, paired] | OOV labels | known words: served / bigram "
          "| mix (models/seq2seq/blend.py COMPONENTS) | epochs (best/run) |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|")
    for r in rows:
        w = r["weights"]
        print(f"| {r['corpus']} | {r['kind']} | {r['words']:,} | {r['train']:,} / {r['eval']:,} | {r['bigram']:.3f} | "
              f"{r['trigram']:.3f} | **{r['served']:.3f}** [{r['interval'][0]:.3f}, {r['interval'][1]:.3f}] | "
              f"{r['gain']:+.3f} [{r['gain_interval'][0]:+.3f}, {r['gain_interval'][1]:+.3f}] | "
              f"{r['oov_labels']:.3f} | {r['served_known']:.3f} / {r['bigram_known']:.3f} | "
              f"{', '.join(f'{value:.2f}' for value in w.values())} | "
              f"{r['best_epoch']}/{r['epochs_run']} |")


if __name__ == "__main__":
    main()

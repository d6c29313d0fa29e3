"""The served text model against the Kneser-Ney reference, on one corpus folder (or the bundled corpus).

The pipeline's steps without its orchestration (benchmarks/seq2seq_quality.py: the data preparation's
split, Transform on train, the real ``run_fn``), then the exported ``serving_default`` scored on the eval
windows as TFMA scores them (the label in the top 5 when fewer than 5 ids score higher), next to the
references on the same windows and tokens (models/seq2seq/baselines.py: unigram, bigram, and the
interpolated modified Kneser-Ney of every train position, which the gate uses). Printed: top-5 with its
95% Wilson interval (models/common/intervals.py), the paired difference served - Kneser-Ney per eval
window with its 95% interval (mean +- 1.96 standard errors of the per-window differences), top-1, and
both on the windows whose next word is known (not OOV: ``generate`` never emits OOV). Nothing is tuned
on the eval windows.

    .venv/bin/python benchmarks/text_kneser_ney.py                          # the bundled corpus
    .venv/bin/python benchmarks/text_kneser_ney.py /usr/share/common-licenses --max-steps 300
    .venv/bin/python benchmarks/text_kneser_ney.py FOLDER --references-only # no training: the references

Results: docs/history/benchmarks-log.md ("The text model against Kneser-Ney").
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
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
from models.seq2seq import baselines, count_reference, features, kneser_ney  # noqa: E402

CONFIG = {"vocab_size": 4000, "context_tokens": 32, "target_tokens": 8}


def paired(difference: np.ndarray) -> tuple[float, float, float]:
    """(mean, low, high): the 95% normal interval of a mean of paired per-window differences."""
    mean = float(difference.mean())
    half = 1.959964 * float(difference.std(ddof=1)) / math.sqrt(len(difference)) if len(difference) > 1 else 0.0
    return mean, mean - half, mean + half


def served_hits(export_dir: str, eval_records: list[bytes], batch: int = 512):
    """Per eval window: (top-1 hit, top-5 hit, label, context ids) of ``serving_default``, labels and contexts
    as ``transform_features`` gives them (what TFMA reads)."""
    model = tf.saved_model.load(export_dir)
    serve, transform_fn = model.signatures["serving_default"], model.signatures["transform_features"]
    top1, top5, labels, contexts = [], [], [], []
    for start in range(0, len(eval_records), batch):
        chunk = tf.constant(eval_records[start:start + batch])
        p = serve(examples=chunk)["probabilities"].numpy()
        transformed = transform_fn(examples=chunk)
        label = transformed[features.NEXT_TOKEN_XF].numpy().reshape(-1)
        higher = (p > p[np.arange(len(label)), label][:, None]).sum(axis=1)
        top1.append(higher < 1)  # as TFMA and the references count it: ties to the label
        top5.append(higher < 5)
        labels.append(label)
        contexts.append(transformed[features.CONTEXT_XF].numpy())
    return (np.concatenate(top1).astype(float), np.concatenate(top5).astype(float), np.concatenate(labels),
            np.concatenate(contexts))


def run(source: str | None, args) -> dict:
    import tensorflow_transform as tft
    from tfx.components.trainer.fn_args_utils import FnArgs

    root = Path(args.work_dir)
    manifest = prepare_text_dataset(source, root / "data", 16, 4, 2)
    key = hashlib.sha256(json.dumps([manifest.fingerprint, CONFIG]).encode()).hexdigest()[:12]
    splits = split_raw_records(manifest)
    data = transform(splits, CONFIG, root / f"transformed-{key}")
    train_glob, eval_glob = str(data / "train" / "*"), str(data / "eval" / "*")
    vocab_size = (tft.TFTransformOutput(str(data / "transform")).vocabulary_size_by_name(features.VOCABULARY)
                  + features.NUM_OOV_BUCKETS)
    started = time.monotonic()
    reference = baselines.ngram_baselines(train_glob, eval_glob)
    fitted, counts, choice, _ = baselines.fit_kneser_ney_reference(
        train_glob, eval_glob, vocab_size, CONFIG["context_tokens"], CONFIG["target_tokens"],
        tuple(order for order in count_reference.ORDERS if order <= args.order) or (args.order,))
    reference_seconds = time.monotonic() - started
    assert counts is not None and choice is not None, fitted
    row = {"source": source or "bundled (pydoc topics)", "words": manifest.extra["num_words"],
           "documents": manifest.extra["num_documents"], "train_windows": len(splits["train"]),
           "eval_windows": len(splits["eval"]), "train_tokens": fitted["train_tokens"],
           "order": choice.order, "reference": fitted["description"], "unigram": reference["unigram_top5"],
           "bigram": reference["bigram_top5"], "reference_seconds": reference_seconds,
           "cross_fitting": fitted["cross_fitting"]}
    eval_contexts, eval_targets = kneser_ney.read_windows(eval_glob, CONFIG["context_tokens"], CONFIG["target_tokens"])
    scored = count_reference.eval_hits(counts.served(), choice, eval_contexts, eval_targets[:, 0])
    kn_top1, kn_top5 = scored["top1"], scored["top5"]
    known = eval_targets[:, 0] < vocab_size - features.NUM_OOV_BUCKETS
    row.update(kneser_ney=float(kn_top5.mean()), kneser_ney_top1=float(kn_top1.mean()),
               kneser_ney_known=float(kn_top5[known].mean()), kneser_ney_top1_known=float(kn_top1[known].mean()),
               kneser_ney_alone=float(scored["alone_top5"].mean()), oov_labels=float(1 - known.mean()))
    if args.references_only:
        return row
    n_train = len(splits["train"])
    steps = min(args.max_steps, args.epochs * math.ceil(n_train / 64))
    settings = TrainingSettings(batch_size=64, learning_rate=3e-3, epochs=args.epochs, seed=42)
    run_dir = root / f"run-{key}-{time.strftime('%H%M%S')}"
    fn_args = FnArgs(train_files=[train_glob], eval_files=[eval_glob], train_steps=steps, eval_steps=1,
                     transform_output=str(data / "transform"), transform_graph_path=str(data / "transform"),
                     serving_model_dir=str(run_dir / "serving"), model_run_dir=str(run_dir / "logs"),
                     custom_config=settings.to_custom_config())
    from models.seq2seq.trainer import run_fn

    started = time.monotonic()
    run_fn(fn_args)
    row["train_seconds"] = time.monotonic() - started
    top1, top5, labels, served_contexts = served_hits(fn_args.serving_model_dir, splits["eval"])
    # The same windows in the same order, or the paired difference means nothing.
    assert np.array_equal(labels, eval_targets[:, 0]) and np.array_equal(served_contexts, eval_contexts)
    with open(run_dir / "serving" / "assets.extra" / "training.json") as handle:
        training = json.load(handle)
    row.update(served=float(top5.mean()), served_top1=float(top1.mean()), served_known=float(top5[known].mean()),
               served_top1_known=float(top1[known].mean()), steps=steps, weights=training["blend"]["weights"],
               paired=paired(top5 - kn_top5), paired_known=paired(top5[known] - kn_top5[known]),
               paired_top1=paired(top1 - kn_top1), blend=training["blend"].get("mix"))
    return row


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", nargs="?", default=None, help="a folder of documents or one file (default: bundled)")
    p.add_argument("--work-dir", default="/tmp/text-kneser-ney")
    p.add_argument("--order", type=int, default=kneser_ney.MAX_ORDER)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--max-steps", type=int, default=1500, help="training steps at most (CPU time)")
    p.add_argument("--references-only", action="store_true", help="score the references, train nothing")
    args = p.parse_args(argv)
    row = run(args.source, args)
    print(json.dumps(row), flush=True)
    n = row["eval_windows"]
    print(f"{row['source']}: {row['words']:,} words, {row['documents']} documents, {row['train_windows']:,} train / "
          f"{n:,} eval windows, Kneser-Ney {row['order']}-gram on {row['train_tokens']:,} train tokens")
    print(f"  reference: {row['reference']} (Kneser-Ney alone: {row['kneser_ney_alone']:.4f})")
    for name in ("unigram", "bigram", "kneser_ney") + (() if args.references_only else ("served",)):
        print(f"  {name:>10} top-5 {row[name]:.4f}{intervals.text(row[name], n)}")
    print(f"  Kneser-Ney top-1 {row['kneser_ney_top1']:.4f}; on known next words ({1 - row['oov_labels']:.1%}): "
          f"top-5 {row['kneser_ney_known']:.4f}, top-1 {row['kneser_ney_top1_known']:.4f}")
    if not args.references_only:
        mean, low, high = row["paired"]
        print(f"  served - Kneser-Ney top-5 (paired, {n:,} windows): {mean:+.4f} [{low:+.4f}, {high:+.4f}]")
        mean, low, high = row["paired_known"]
        print(f"  on known next words: served top-5 {row['served_known']:.4f}, paired {mean:+.4f} "
              f"[{low:+.4f}, {high:+.4f}]")
        mean, low, high = row["paired_top1"]
        print(f"  top-1: served {row['served_top1']:.4f} vs {row['kneser_ney_top1']:.4f}, paired {mean:+.4f} "
              f"[{low:+.4f}, {high:+.4f}]; mix {row['weights']}")


if __name__ == "__main__":
    main()

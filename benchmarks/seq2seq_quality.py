"""Seq2seq quality on the default corpus: the model next to the n-gram baselines, one run.

Reproduces what the pipeline does, without its orchestration: the train/eval split the
data preparation wrote (data/text_split.py: whole held-out documents here), Transform analyses the train
split only, the real ``run_fn`` trains and exports, and the exported ``serving_default``
is scored on the eval windows the way TFMA scores it (label from ``transform_features``).

    .venv/bin/python benchmarks/seq2seq_quality.py                  # proposed defaults
    .venv/bin/python benchmarks/seq2seq_quality.py --steps 200      # quick look

Steps default to what the pipeline derives from --epochs (epochs x estimated train
windows / batch size), and validation runs over the whole eval split each epoch, as in
the pipeline.

The transformed data is cached in ``--work-dir`` per data/transform settings, so
repeated runs with other training settings skip Beam.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import stackenv  # noqa: F401,E402  (before TensorFlow)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from data import text_features  # noqa: E402
from data.text import prepare_text_dataset  # noqa: E402
from data.tfrecords import iter_records, list_files  # noqa: E402
from models.common.training import TrainingSettings  # noqa: E402
from models.seq2seq import features  # noqa: E402
from models.seq2seq.baselines import ngram_baselines  # noqa: E402
from models.seq2seq.export import generate_request  # noqa: E402
from models.seq2seq.trainer import MODEL_DEFAULTS, run_fn  # noqa: E402

log = logging.getLogger("seq2seq_quality")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--work-dir", default="/tmp/seq2seq-quality")
    p.add_argument("--context-words", type=int, default=16)
    p.add_argument("--target-words", type=int, default=4)
    p.add_argument("--stride", type=int, default=2)
    for key, default in features.TRANSFORM_DEFAULTS.items():
        p.add_argument("--" + key.replace("_", "-"), type=int, default=default)
    p.add_argument("--steps", type=int, default=None, help="total training steps")
    p.add_argument("--epochs", type=int, default=5, help="Keras epochs the steps are spread over")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--eval-steps", type=int, default=None, help="validation batches per epoch")
    for key, default in MODEL_DEFAULTS.items():
        p.add_argument("--" + key.replace("_", "-"), type=type(default), default=default)
    p.add_argument("--strategy", default="mirrored")
    p.add_argument("--seed", type=int, default=42)
    return p.parse_args(argv)


# ------------------------------------------------------------------------ transform


def split_raw_records(manifest) -> dict[str, list[bytes]]:
    """Serialized raw examples per split, as the data preparation split them (data/text_split.py)."""
    splits: dict[str, list[bytes]] = {}
    for name, pattern in manifest.extra["split_patterns"].items():
        splits[name] = [record for path in list_files(os.path.join(manifest.examples_dir, pattern))
                        for record in iter_records(path)]
    return splits


def transform(splits: dict[str, list[bytes]], transform_config: dict, out: Path) -> Path:
    """Analyse train, transform both splits; writes ``out/{train,eval}/*.gz`` and ``out/transform``."""
    if (out / "done").exists():
        return out
    import tensorflow_transform as tft
    import tensorflow_transform.beam as tft_beam
    from tensorflow_transform.tf_metadata import dataset_metadata, metadata_io

    from models.seq2seq.preprocessing import preprocessing_fn

    raw_spec = {k: tf.io.FixedLenFeature([], tf.string) for k in text_features.ALL_FEATURES}
    metadata = dataset_metadata.DatasetMetadata.from_feature_spec(raw_spec)
    rows = {name: [{k: tf.train.Example.FromString(r).features.feature[k].bytes_list.value[0]
                    for k in raw_spec} for r in records] for name, records in splits.items()}

    def fn(inputs):
        return preprocessing_fn(inputs, custom_config=transform_config)

    with tft_beam.Context(temp_dir=str(out / "tmp"), force_tf_compat_v1=False):
        transform_fn = (rows["train"], metadata) | tft_beam.AnalyzeDataset(fn)
        _ = transform_fn | tft_beam.WriteTransformFn(str(out / "transform"))
        for name, split_rows in rows.items():
            (transformed, _) = ((split_rows, metadata), transform_fn) | tft_beam.TransformDataset(
                output_record_batches=False)
            _write_transformed(transformed, out / name / "transformed-00000-of-00001.gz")
    metadata_io.write_metadata(
        metadata, str(out / "transform" / tft.TFTransformOutput.RAW_METADATA_DIR))
    (out / "done").write_text("ok\n")
    return out


def _write_transformed(rows, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path), options="GZIP") as writer:
        for row in rows:
            feature = {k: tf.train.Feature(int64_list=tf.train.Int64List(
                value=np.atleast_1d(v).tolist())) for k, v in row.items()}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature))
                         .SerializeToString())


# ----------------------------------------------------------------------- evaluation


def score_export(export_dir: str, eval_records: list[bytes], batch: int = 512) -> dict:
    """Next-token top-1/top-5 and perplexity of ``serving_default``, labels as TFMA reads them."""
    model = tf.saved_model.load(export_dir)
    serve, labels_fn = model.signatures["serving_default"], model.signatures["transform_features"]
    top1 = top5 = 0
    nll = 0.0
    for start in range(0, len(eval_records), batch):
        chunk = tf.constant(eval_records[start:start + batch])
        probs = serve(examples=chunk)["probabilities"].numpy()
        labels = labels_fn(examples=chunk)[features.NEXT_TOKEN_XF].numpy()
        ranked = np.argsort(-probs, axis=1)[:, :5]
        top1 += int((ranked[:, 0] == labels).sum())
        top5 += int((ranked == labels[:, None]).any(axis=1).sum())
        nll += float(-np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12)).sum())
    n = len(eval_records)
    return {"top1": top1 / n, "top5": top5 / n, "perplexity": math.exp(nll / n), "n": n}


def samples(export_dir: str) -> list[tuple[str, str, str]]:
    model = tf.saved_model.load(export_dir)
    generate = model.signatures["generate"]
    prompts = ["The for statement is used to iterate over the elements of a",
               "If the exception is not handled, the",
               "A class definition defines a class"]
    greedy = generate(**generate_request(prompts, max_new_tokens=24))["continuations"]
    sampled = generate(**generate_request(prompts, max_new_tokens=24, top_k=5, temperature=0.8, top_p=0.9,
                                          seed=0))["continuations"]
    return [(p, g.decode(), s.decode()) for p, g, s in zip(prompts, greedy.numpy(), sampled.numpy())]


# ----------------------------------------------------------------------------- main


def main(argv=None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", force=True)
    logging.getLogger("absl").setLevel(logging.WARNING)
    work = Path(args.work_dir)
    manifest = prepare_text_dataset(None, work / "data", args.context_words,
                                    args.target_words, args.stride)
    transform_config = {k: getattr(args, k) for k in features.TRANSFORM_DEFAULTS}
    key = hashlib.sha256(json.dumps([manifest.fingerprint, transform_config]).encode()).hexdigest()
    splits = split_raw_records(manifest)
    started = time.monotonic()
    data = transform(splits, transform_config, work / f"transformed-{key[:12]}")
    log.info("Transform ready in %.0f s: %s", time.monotonic() - started, data)

    train_glob, eval_glob = str(data / "train" / "*"), str(data / "eval" / "*")
    started = time.monotonic()
    reference = ngram_baselines(train_glob, eval_glob)
    log.info("Baselines in %.1f s", time.monotonic() - started)

    # As PipelineConfig.resolved_train_steps / resolved_eval_steps (4:1 split estimate).
    steps = args.steps or args.epochs * math.ceil(manifest.num_examples * 0.8 / args.batch_size)
    eval_steps = args.eval_steps or math.ceil(manifest.num_examples * 0.2 / args.batch_size)
    epochs = max(1, min(args.epochs, steps))
    family = {k: getattr(args, k) for k in MODEL_DEFAULTS}
    settings = TrainingSettings(strategy=args.strategy, batch_size=args.batch_size,
                                learning_rate=args.learning_rate, epochs=epochs,
                                seed=args.seed, family=family)
    run_dir = work / f"run-{time.strftime('%Y%m%d-%H%M%S')}"
    from tfx.components.trainer.fn_args_utils import FnArgs

    fn_args = FnArgs(train_files=[train_glob], eval_files=[eval_glob], train_steps=steps,
                     eval_steps=eval_steps, transform_output=str(data / "transform"),
                     transform_graph_path=str(data / "transform"),
                     serving_model_dir=str(run_dir / "serving"),
                     model_run_dir=str(run_dir / "logs"), custom_config=settings.to_custom_config())
    started = time.monotonic()
    run_fn(fn_args)
    train_seconds = time.monotonic() - started
    scores = score_export(fn_args.serving_model_dir, splits["eval"])

    n_train, n_eval = len(splits["train"]), len(splits["eval"])
    print()
    print(f"Default corpus: {manifest.num_examples} windows ({args.context_words}+"
          f"{args.target_words} words, stride {args.stride}), {manifest.extra['num_documents']} "
          f"documents; {manifest.extra['split']['description']} -> train {n_train}, eval {n_eval}")
    print(f"Transform: {transform_config}")
    print(f"Training: {steps} steps x batch {args.batch_size} "
          f"(~{steps * args.batch_size / n_train:.1f} epochs of the train windows), "
          f"lr {args.learning_rate}, {family}: {train_seconds:.0f} s incl. baselines and export")
    print()
    print(f"{'next-token on eval (' + str(scores['n']) + ' windows)':<42}{'top-1':>8}{'top-5':>8}"
          f"{'ppl':>9}")
    print(f"{'unigram baseline':<42}{'':>8}{reference['unigram_top5']:>8.4f}")
    print(f"{'bigram baseline':<42}{'':>8}{reference['bigram_top5']:>8.4f}")
    print(f"{'seq2seq (exported serving_default)':<42}{scores['top1']:>8.4f}{scores['top5']:>8.4f}"
          f"{scores['perplexity']:>9.1f}")
    verdict = "BEATS" if scores["top5"] > reference["bigram_top5"] else "does NOT beat"
    print(f"-> model top-5 {verdict} the bigram baseline by "
          f"{scores['top5'] - reference['bigram_top5']:+.4f}")
    print()
    for prompt, greedy, sampled in samples(fn_args.serving_model_dir):
        print(f"{prompt!r}\n   greedy: {greedy}\n   top-5, top-p 0.9, T=0.8: {sampled}")


if __name__ == "__main__":
    main()

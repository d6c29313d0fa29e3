"""TFX Trainer entry point for the seq2seq family (``run_fn`` is referenced by dotted path).

``TrainingSettings.family`` (all optional, see ``MODEL_DEFAULTS``): ``embedding_dim``,
``units``, ``dropout``, ``cell`` ("lstm" or "gru"), ``lr_schedule`` ("constant" or
"cosine"), ``label_smoothing``. Vocabulary and sequence lengths come from the Transform
output, so they cannot disagree with the data. The n-gram reference scores go into the export as
``assets.extra/references.json`` (``models/common/references.py``), for the blessing gate.
A Tuner's best values (TFX's ``hyperparameters`` channel, ``fn_args.hyperparameters``;
search space: ``models/seq2seq/hparams.py``) override these settings and the learning rate;
``assets.extra/training.json`` records what was used.
"""
import dataclasses
import hashlib
import json
import logging
import os
from collections.abc import Mapping
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs

from models.common import references
from models.common.distribution import make_strategy
from models.common.inputs import make_dataset
from models.common.multi_worker import export_dir
from models.common.search_space import values_of
from models.common.training import TrainingSettings
from models.common.warm_start import write_record
from models.seq2seq import baselines, export, features
from models.seq2seq.evaluation import GATE_METRIC
from models.seq2seq.hparams import LEARNING_RATE
from models.seq2seq.model import build_seq2seq, teacher_forcing

log = logging.getLogger(__package__)  # "models.seq2seq"

# Measured on the default corpus (benchmarks/seq2seq_quality.py, benchmarks/README.md): dropout 0.5
# beat 0.2 and 0.4; GRU and tied input/output embeddings learned markedly slower; a cosine schedule,
# label smoothing, a heavier first target token and an encoder next-token loss all lost next-token top-5.
MODEL_DEFAULTS: dict[str, Any] = {
    "embedding_dim": 128, "units": 256, "dropout": 0.5, "cell": "lstm", "lr_schedule": "constant",
    "label_smoothing": 0.0}
BASELINES_FILE = "baselines.json"
TRAINING_FILE = "training.json"


def model_settings(family: Mapping[str, Any]) -> dict[str, Any]:
    """``MODEL_DEFAULTS`` overridden by the family settings; unknown keys fail loudly."""
    unknown = set(family) - set(MODEL_DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown seq2seq settings {sorted(unknown)}; known: {sorted(MODEL_DEFAULTS)}")
    return {**MODEL_DEFAULTS, **family}


def run_fn(fn_args: FnArgs) -> None:
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tuned = values_of(fn_args.hyperparameters)
    hyper = model_settings({**settings.family, **{k: v for k, v in tuned.items() if k != LEARNING_RATE}})
    if LEARNING_RATE in tuned:
        settings = dataclasses.replace(settings, learning_rate=float(tuned[LEARNING_RATE]))
    tf.keras.utils.set_random_seed(settings.seed)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    vocab_size = (tf_transform_output.vocabulary_size_by_name(features.VOCABULARY)
                  + features.NUM_OOV_BUCKETS)
    spec = tf_transform_output.transformed_feature_spec()
    context_tokens = spec[features.CONTEXT_XF].shape[0]
    target_tokens = spec[features.TARGET_XF].shape[0]

    reference = baselines.ngram_baselines(fn_args.train_files, fn_args.eval_files)
    log.info("Reference next-token top-5 accuracy on %d eval windows: unigram %.4f, bigram %.4f",
             reference["eval_examples"], reference["unigram_top5"], reference["bigram_top5"])
    tf.io.gfile.makedirs(fn_args.model_run_dir)
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, BASELINES_FILE), "w") as f:
        f.write(json.dumps(reference, indent=2, sort_keys=True) + "\n")

    strategy = make_strategy(settings.strategy)
    global_batch = settings.batch_size * strategy.num_replicas_in_sync
    train = teacher_forcing(make_dataset(fn_args.train_files, spec, features.TARGET_XF,
                                         global_batch, seed=settings.seed,
                                         **settings.input_options()))
    evaluation = teacher_forcing(make_dataset(fn_args.eval_files, spec, features.TARGET_XF,
                                              global_batch, shuffle=False, repeat=True,
                                              **settings.input_options()))
    steps_per_epoch = settings.steps_per_epoch(fn_args.train_steps)
    total_steps = steps_per_epoch * settings.epochs
    # What the weights are tied to: a later --warm-start reuses them only if all of it matches
    # (the same tokens must have the same ids, so the vocabulary itself, by digest).
    vocabulary = tf_transform_output.vocabulary_by_name(features.VOCABULARY)
    identity = {"family": "seq2seq", "context_tokens": int(context_tokens), "target_tokens": int(target_tokens),
                "vocabulary_size": int(vocab_size),
                "vocabulary_sha256": hashlib.sha256(b"\n".join(vocabulary)).hexdigest()}
    warm = settings.warm_starter(fn_args, identity, log)

    def build():
        with strategy.scope():
            return build_seq2seq(vocab_size, context_tokens, target_tokens,
                                 settings.learning_rate, jit_compile=settings.jit_compile,
                                 total_steps=total_steps, **hyper)

    model = warm.build(build)
    log.info("Training seq2seq %s (vocab %d, %d context -> %d target tokens): %d steps "
             "(%d epochs x %d), global batch %d", hyper, vocab_size, context_tokens,
             target_tokens, total_steps, settings.epochs,
             steps_per_epoch, global_batch)
    settings.fit(model, train, evaluation, fn_args, log, validate_every_epoch=True)
    with export_dir(strategy, fn_args.serving_model_dir) as target:  # chief only (multi_worker.py)
        export.export_serving_model(model, tf_transform_output, target)
        # The n-gram scores travel with the model they were measured for (same split, same
        # tokens), in the format the blessing gate reads (models/common/references.py).
        references.write_references(
            target, GATE_METRIC, {"unigram": reference["unigram_top5"], "bigram": reference["bigram_top5"]},
            "bigram", settings.gate_margin, extra={"eval_examples": reference["eval_examples"]})
        write_record(target, identity, warm.decision)
        training = {"hparams": hyper, "learning_rate": settings.learning_rate, "tuned": tuned,
                    "regime": "fixed_steps", "steps": total_steps,
                    "epochs_run": settings.epochs, "why": "no early stopping: --epochs or --train-steps set the length"}
        with tf.io.gfile.GFile(os.path.join(target, references.ASSETS_EXTRA, TRAINING_FILE), "w") as f:
            f.write(json.dumps(training, indent=2, sort_keys=True) + "\n")

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
import math
import os
import shutil
import tempfile
from collections.abc import Mapping
from typing import Any

import attr
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs

from data.manifest import facts_in
from models.common import references
from models.common.callbacks import BestWeights, StopAfterSeconds
from models.common.distribution import make_strategy
from models.common.inputs import make_dataset
from models.common.multi_worker import export_dir
from models.common.search_space import values_of
from models.common.training import TrainingSettings, fit
from models.common.warm_start import WarmStarter, write_record
from models.seq2seq import baselines, blend, count_reference, export, features, holdout, kneser_ney
from models.seq2seq.evaluation import GATE_METRIC
from models.seq2seq.hparams import LEARNING_RATE
from models.seq2seq.memory import check_count_memory
from models.seq2seq.model import build_seq2seq, teacher_forcing

log = logging.getLogger(__package__)  # "models.seq2seq"

# Measured on the default corpus (benchmarks/seq2seq_quality.py, benchmarks/README.md): dropout 0.5
# beat 0.2 and 0.4; GRU and tied input/output embeddings learned markedly slower; a cosine schedule,
# label smoothing, a heavier first target token and an encoder next-token loss all lost next-token top-5.
MODEL_DEFAULTS: dict[str, Any] = {
    "embedding_dim": 128, "units": 256, "dropout": 0.5, "cell": "lstm", "lr_schedule": "constant",
    "label_smoothing": 0.0}
#: Dropout where neither the family settings nor a Tuner set it: ``MODEL_DEFAULTS``' on a small corpus, this from
#: ``LARGE_CORPUS_WINDOWS`` fit windows on. A million words' network learned about twice as fast at 0.2 as at
#: 0.5 within the step budget, where training sees each window a few times (docs/history/benchmarks-log.md,
#: "Text at a million words"); 0.5 stays where it was measured best (the default corpus) and on 250,000 words.
LARGE_CORPUS_DROPOUT = 0.2
LARGE_CORPUS_WINDOWS = 200_000
BASELINES_FILE = "baselines.json"
#: Eval windows the served model and its count part are compared on at most (``_disagreements``).
MAX_PAIRED_WINDOWS = 20_000
#: Epochs without a better held-out top-5 before training stops (when --train-steps is not given).
EARLY_STOP_PATIENCE = 2
#: Steps a run trains at most when --train-steps is not given: the passes' budget grows with the corpus (a
#: million words' 6 passes are 33,144 steps), and this kept such a run near 25 minutes on 2 cores with the
#: network well above its counts; its held-out top-5 still rose at the end, so --train-steps trains longer
#: (docs/history/benchmarks-log.md, "Text at a million words").
MAX_STEPS = 20_000
#: Seconds of training at most when --train-steps is not given (``MAX_STEPS`` may come first): the same steps
#: took more than twice as long on a slower 2-core machine, and a run should end in a time a user can plan for
#: on any of them (docs/history/benchmarks-log.md, "A time budget for the text model").
MAX_TRAINING_SECONDS = 30 * 60
TRAINING_FILE = "training.json"


def model_settings(family: Mapping[str, Any]) -> dict[str, Any]:
    """``MODEL_DEFAULTS`` overridden by the family settings; unknown keys fail loudly."""
    unknown = set(family) - set(MODEL_DEFAULTS)
    if unknown:
        raise ValueError(
            f"Unknown seq2seq settings {sorted(unknown)}; known: {sorted(MODEL_DEFAULTS)}")
    return {**MODEL_DEFAULTS, **family}


def _fit_blend(model, fit_file: str, holdout_file: str, vocab_size: int, context_tokens: int, target_tokens: int,
               choice: count_reference.Choice | None) -> tuple[dict[str, float], dict[str, float], dict]:
    """The mixes of network and counts (models/seq2seq/blend.py): the served one (top-5) and the one
    ``generate`` draws from (log-likelihood), and their record. The counts are the reference's model
    (``choice``: its order and shares, cross-fitted on train), here fitted on the fit windows' text only, as
    the network's training: the held-out windows are new to both; the network's shares are chosen on them
    (``count_reference.held_out_counts``)."""
    if choice is None:
        return dict(blend.FALLBACK), dict(blend.FALLBACK), {"note": "no Kneser-Ney model: the network alone"}
    held_contexts, held_targets = kneser_ney.read_windows(holdout_file, context_tokens, target_tokens)
    contexts, targets, starts = kneser_ney.read_windows_and_starts(fit_file, context_tokens, target_tokens)
    stream, _, events = kneser_ney.rebuild_with_owners(contexts, targets, starts=starts)
    del contexts, targets, starts
    held = count_reference.held_out_counts(stream, events, vocab_size, choice, held_contexts, held_targets,
                                           blend.MAX_FIT_WINDOWS)
    network = [np.zeros([0, vocab_size], np.float32)]
    for start in range(0, len(held.contexts), 256):
        network.append(tf.nn.softmax(model.next_token_logits(tf.constant(held.contexts[start:start + 256]))).numpy())
    network_p = np.concatenate(network)
    weights, record = blend.fit_network_share(network_p, held.counts, held.labels, choice.shares())
    generation, record["generation"] = blend.fit_generation_share(network_p, held.counts, held.labels,
                                                                  choice.shares())
    return weights, generation, record


def _disagreements(model, eval_files, tokens: "_Tokens", choice: count_reference.Choice) -> dict[str, float]:
    """On the eval windows, how many the served model and the count model it contains (the Kneser-Ney
    reference, ``choice``) do not both hit or both miss, estimated on at most ``MAX_PAIRED_WINDOWS`` of them
    (seeded) and scaled to the split: the noise of the gate's paired comparison of the two
    (``references.contained_demand``), and the served model's top-5 gain over the count model on the windows
    scored, with its paired 95% interval (the summary's line). Nothing is chosen on them: they size the test
    and report the gain; the Evaluator decides."""
    contexts, targets = kneser_ney.read_windows(eval_files, tokens.context, tokens.target)
    keep = references.subsample(len(targets), MAX_PAIRED_WINDOWS, seed=2)
    differences = [np.zeros([0])]
    for start in range(0, len(keep), 256):
        rows = keep[start:start + 256]
        chunk = tf.constant(contexts[rows].astype(np.int64))
        labels = targets[rows, 0].astype(np.int64)
        ngram_parts = model.ngram.probabilities(chunk)  # the count model's, and the served model's count part
        parts = {name: value.numpy() for name, value in ngram_parts.items()}
        counts = count_reference.mixed(parts, parts["kneser_ney"], choice.cache, choice.unknown)
        served = export.next_token_probabilities(model, chunk, ngram_parts).numpy()
        differences.append(count_reference.hits(served, labels)[1] - count_reference.hits(counts, labels)[1])
    difference = np.concatenate(differences)
    scale = len(targets) / max(len(keep), 1)
    found = {"discordant": float(np.abs(difference).sum()) * scale, "windows": int(len(targets)),
             "scored": int(len(keep))}
    if len(difference) > 1:  # the served model's top-5 gain over the count model, with its paired 95% interval
        gain, spread = float(difference.mean()), 1.96 * float(difference.std(ddof=1)) / math.sqrt(len(difference))
        found.update(gain=gain, gain_low=gain - spread, gain_high=gain + spread)
    return found


def reference_scores(reference: Mapping[str, Any]) -> tuple[dict[str, float], dict[str, Any]]:
    """The references' top-5 scores for references.json, and its extra facts: what each is, and which could
    not be fitted (named in the summary, left out of the gate; the gate's reference is the strongest of the rest)."""
    scores = {"unigram": float(reference["unigram_top5"]), "bigram": float(reference["bigram_top5"])}
    extra: dict[str, Any] = {"eval_examples": reference["eval_examples"],
                             "eval_split_examples": reference["eval_examples"], "not_fitted": {}}
    fitted = reference.get(baselines.KNESER_NEY) or {}
    if "not_fitted" in fitted:
        extra["not_fitted"][baselines.KNESER_NEY] = f"interpolated modified Kneser-Ney: {fitted['not_fitted']}"
    elif fitted:
        scores[baselines.KNESER_NEY] = float(fitted["kneser_ney_top5"])
        what = fitted.get("description") or f"interpolated modified Kneser-Ney {fitted['order']}-gram"
        events = f", {fitted['word_start_events']:,} word starts" if fitted.get("word_start_events") else ""
        extra["descriptions"] = {baselines.KNESER_NEY: (
            f"{what} ({fitted['train_tokens']:,} tokens{events}; order, counting and shares cross-fitted on train)")}
        extra["kneser_ney_top1"] = float(fitted["kneser_ney_top1"])
    return scores, extra


def _kneser_ney_text(fitted: Mapping[str, Any]) -> str:
    if "not_fitted" in fitted:
        return f"Kneser-Ney not fitted ({fitted['not_fitted']})"
    return (f"Kneser-Ney ({fitted.get('description', str(fitted['order']) + '-gram')}, {fitted['train_tokens']} train "
            f"tokens) {fitted['kneser_ney_top5']:.4f}")


@dataclasses.dataclass(frozen=True)
class _Tokens:
    """What the Transform output fixes: the vocabulary (with its OOV buckets) and the window lengths."""

    vocab_size: int
    context: int
    target: int
    vocabulary: list[bytes]

    @classmethod
    def of(cls, transform_output: tft.TFTransformOutput) -> "_Tokens":
        spec = transform_output.transformed_feature_spec()
        return cls(transform_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS,
                   spec[features.CONTEXT_XF].shape[0], spec[features.TARGET_XF].shape[0],
                   list(transform_output.vocabulary_by_name(features.VOCABULARY)))

    def identity(self) -> dict[str, Any]:
        """What the weights are tied to: a later --warm-start reuses them only if all of it matches
        (the same tokens must have the same ids, so the vocabulary itself, by digest)."""
        return {"family": "seq2seq", "context_tokens": int(self.context), "target_tokens": int(self.target),
                "vocabulary_size": int(self.vocab_size),
                "vocabulary_sha256": hashlib.sha256(b"\n".join(self.vocabulary)).hexdigest()}


def run_fn(fn_args: FnArgs) -> None:
    settings, hyper, tuned = _settings(fn_args)
    tf.keras.utils.set_random_seed(settings.seed)
    transform_output = tft.TFTransformOutput(fn_args.transform_output)
    tokens = _Tokens.of(transform_output)
    check_count_memory(facts_in(fn_args.custom_config), tokens.context, tokens.target)
    reference, count_model, choice, text_order = _references(fn_args, tokens)
    strategy = make_strategy(settings.strategy)
    scratch = tempfile.mkdtemp(prefix="seq2seq-holdout-")
    try:
        fit_file, holdout_file, split = holdout.split_files(fn_args.train_files, scratch, text_order)
        log.info("Held out %d of the train windows (blocks; %d beside them unused) to stop training and fit the "
                 "mix with the n-gram counts", split["holdout"], split["gap"])
        hyper = corpus_dropout(hyper, {*settings.family, *tuned}, split["fit"])
        warm = WarmStarter.for_trainer(settings.warm_start, fn_args, tokens.identity(), log)
        model, trained = _train(fn_args, settings, hyper, tokens, transform_output.transformed_feature_spec(),
                                strategy, warm, fit_file, holdout_file, split)
        # A minute or more on a large corpus with no step counter: say what the Trainer is doing.
        log.info("Fitting the served mix of the network and the n-gram counts (held-out and cross-fitted windows)")
        weights, generation, blend_record = _fit_blend(model, fit_file, holdout_file, tokens.vocab_size,
                                                       tokens.context, tokens.target, choice)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log.info("Served mix of the network and the n-gram counts: %s (held-out top-5 %s); generate draws from %s "
             "(held-out log-likelihood %s)", weights, blend_record.get("mix"), generation,
             blend_record.get("generation", {}).get("log_likelihood"))
    # The served counts are the Kneser-Ney reference itself (every train window's text), when it was fitted.
    model.ngram = count_model.served() if count_model is not None else None
    model.blend_weights = tf.Variable([weights[name] for name in blend.COMPONENTS], trainable=False,
                                      name="blend_weights")
    model.generate_weights = tf.Variable([generation[name] for name in blend.COMPONENTS], trainable=False,
                                         name="generate_weights")
    with export_dir(strategy, fn_args.serving_model_dir) as target:  # chief only (multi_worker.py)
        export.export_serving_model(model, transform_output, target)
        # The n-gram scores travel with the model they were measured for (same split, same
        # tokens), in the format the blessing gate reads (models/common/references.py).
        scores, extra = reference_scores(reference)
        # The served model contains the Kneser-Ney reference (its count part): the gate asks it for at least
        # that reference's hits, and the margin over the references it does not contain.
        contained = [baselines.KNESER_NEY] if model.ngram is not None and baselines.KNESER_NEY in scores else []
        if contained and weights["network"] > 0:  # with no share the two rank alike: nothing to weigh
            extra["paired"] = {baselines.KNESER_NEY: _disagreements(model, fn_args.eval_files, tokens, choice)}
        strongest = max(scores, key=scores.__getitem__)
        deciding = references.gate_demand({"references": scores, "gate_reference": strongest, "contained": contained,
                                           "margin": settings.gate_margin, "eval_examples": extra["eval_examples"]})
        references.write_references(target, GATE_METRIC, scores, (deciding and deciding.name) or strongest,
                                    settings.gate_margin, extra=extra, contained=contained)
        write_record(target, tokens.identity(), warm.decision)
        record = {**trained, "hparams": hyper, "learning_rate": settings.learning_rate, "tuned": tuned,
                  "holdout_examples": split["holdout"], "holdout": split,
                  "blend": {**blend_record, "weights": weights, "generation_weights": generation}}
        with tf.io.gfile.GFile(os.path.join(target, references.ASSETS_EXTRA, TRAINING_FILE), "w") as f:
            f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")


def corpus_dropout(hyper: dict[str, Any], given: set[str], fit_windows: int) -> dict[str, Any]:
    """``hyper`` with the dropout the corpus's size asks for, unless ``given`` (the keys a user or a Tuner set)
    holds it."""
    if "dropout" in given or fit_windows < LARGE_CORPUS_WINDOWS:
        return hyper
    return {**hyper, "dropout": LARGE_CORPUS_DROPOUT}


def _settings(fn_args: FnArgs) -> tuple[TrainingSettings, dict[str, Any], dict[str, Any]]:
    """The training settings, the model's hyperparameters and the Tuner's values that overrode them."""
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tuned = values_of(fn_args.hyperparameters)
    hyper = model_settings({**settings.family, **{k: v for k, v in tuned.items() if k != LEARNING_RATE}})
    if LEARNING_RATE in tuned:
        settings = dataclasses.replace(settings, learning_rate=float(tuned[LEARNING_RATE]))
    return settings, hyper, tuned


def _references(fn_args: FnArgs, tokens: _Tokens):
    """The count references on the eval split (unigram, bigram, the cross-fitted Kneser-Ney mix), written to
    the run's logs; the Kneser-Ney tables and choice the served model reuses, and the train windows' order in
    the text (the held-out blocks)."""
    reference: dict[str, Any] = dict(baselines.ngram_baselines(fn_args.train_files, fn_args.eval_files))
    reference[baselines.KNESER_NEY], counts, choice, text_order = baselines.fit_kneser_ney_reference(
        fn_args.train_files, fn_args.eval_files, tokens.vocab_size, tokens.context, tokens.target)
    log.info("Reference next-token top-5 accuracy on %d eval windows: unigram %.4f, bigram %.4f, %s",
             reference["eval_examples"], reference["unigram_top5"], reference["bigram_top5"],
             _kneser_ney_text(reference[baselines.KNESER_NEY]))
    record = choice.record if choice else {}
    for note in [*record.get("notes", []), *([record["note"]] if "note" in record else [])]:
        # e.g. too few word starts: every position alone
        log.info("Kneser-Ney's choice: %s", note)
    tf.io.gfile.makedirs(fn_args.model_run_dir)
    with tf.io.gfile.GFile(os.path.join(fn_args.model_run_dir, BASELINES_FILE), "w") as f:
        f.write(json.dumps(reference, indent=2, sort_keys=True) + "\n")
    return reference, counts, choice, text_order


def step_budget(settings: TrainingSettings, train_steps: int) -> int:
    """--train-steps exactly; else the passes' steps (TrainArgs), at most ``MAX_STEPS``."""
    return train_steps if settings.explicit_steps else min(train_steps, MAX_STEPS)


def time_budget(settings: TrainingSettings) -> StopAfterSeconds | None:
    """The callback that ends training after ``MAX_TRAINING_SECONDS``, unless --train-steps set the length or
    workers train together (they would stop at different steps: ``StopAfterSeconds``)."""
    if settings.explicit_steps or settings.strategy == "multi_worker":
        return None
    return StopAfterSeconds(MAX_TRAINING_SECONDS)


def _train(fn_args: FnArgs, settings: TrainingSettings, hyper: dict[str, Any], tokens: _Tokens, spec: dict,
           strategy, warm, fit_file: str, holdout_file: str, split: dict[str, int]) -> tuple[Any, dict[str, Any]]:
    """The network trained on the fit windows; the best epoch on the held-out ones is kept (without
    --train-steps training may stop after EARLY_STOP_PATIENCE epochs without a better held-out top-5).
    Returns the model and what training.json records of it."""
    global_batch = settings.batch_size * strategy.num_replicas_in_sync
    train = teacher_forcing(make_dataset(fit_file, spec, features.TARGET_XF, global_batch, seed=settings.seed,
                                         **settings.input_options()))
    evaluation = teacher_forcing(make_dataset(holdout_file if split["holdout"] else fit_file, spec,
                                              features.TARGET_XF, global_batch, shuffle=False, repeat=True,
                                              **settings.input_options()))
    budget = step_budget(settings, fn_args.train_steps)
    if budget < fn_args.train_steps:
        log.info("Step budget: %d steps at most (the passes would take %d; --train-steps trains longer)", budget,
                 fn_args.train_steps)
    steps_per_epoch = settings.steps_per_epoch(budget)
    total_steps = min(steps_per_epoch * settings.epochs, budget)  # what ``fit`` trains: the last epoch may be cut

    def build():
        with strategy.scope():
            return build_seq2seq(tokens.vocab_size, tokens.context, tokens.target, settings.learning_rate,
                                 jit_compile=settings.jit_compile, total_steps=total_steps, **hyper)

    model = warm.build(build)
    timer = time_budget(settings)
    log.info("Training seq2seq %s (vocab %d, %d context -> %d target tokens): %d steps (%d epochs x %d)%s, "
             "global batch %d", hyper, tokens.vocab_size, tokens.context, tokens.target, total_steps,
             settings.epochs, steps_per_epoch, f" or {MAX_TRAINING_SECONDS // 60} minutes, whichever comes first"
             if timer else "", global_batch)
    stopper = BestWeights(monitor="val_next_token_top5",
                          patience=settings.epochs if settings.explicit_steps else EARLY_STOP_PATIENCE)
    eval_steps = max(1, math.ceil(max(1, split["holdout"]) / global_batch))
    history = fit(settings, model, train, evaluation, attr.evolve(fn_args, train_steps=budget, eval_steps=eval_steps),
                  log, validate_every_epoch=True, callbacks=(stopper, timer) if timer else (stopper,))
    timed: dict[str, Any] = {}  # training.json's account of the time budget, when there was one
    if timer is not None:
        timed = {"time_budget_s": MAX_TRAINING_SECONDS, "stopped_at_time_budget": timer.reached,
                 **({"steps_run": timer.steps} if timer.reached else {})}
    if timer is not None and timer.reached:
        log.info("Training stopped at its %d-minute budget after %d of %d steps; the best check's weights are kept "
                 "(--train-steps trains exactly that many steps)", MAX_TRAINING_SECONDS // 60, timer.steps,
                 total_steps)
    return model, {
        "regime": "fixed_steps" if settings.explicit_steps else "early_stopping", "steps": total_steps,
        "epochs_run": stopper.epochs_run, "best_epoch": stopper.best_epoch + 1, "steps_per_epoch": steps_per_epoch,
        **timed,
        # Per epoch: loss and next_token_top5 on the fit windows and (val_) held-out ones, what the
        # summary's advice reads (overfitting or underfitting).
        "curves": {key: [float(v) for v in values] for key, values in history.history.items()},
        "stopped_early": stopper.stopped_early,
        "why": ("--train-steps set the length; the best held-out epoch is kept" if settings.explicit_steps
                else "the best epoch on held-out train windows is kept")}

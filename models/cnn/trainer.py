"""TFX Trainer entry point for the CNN family (``run_fn`` is referenced by dotted path).

ExampleGen's splits are read into memory through the transform graph (Transform only analyses:
models/common/raw_examples.py; ``inputs.load_split``), or as their raw pixels, one byte each, transformed
batch by batch, where the transformed pixels would exceed the in-memory budget (models/cnn/byte_pixels.py), then:
reference predictors are fitted and scored (models/common/references.py) in a thread while the CNN trains
with early stopping on a held-out part of train and class weights when they help
(models/common/regime.py), and the export carries ``assets.extra/references.json`` (the
gate's input) and ``assets.extra/training.json`` (the chosen epoch, the class-weight trial).
A split too big for memory even as bytes streams instead: the same step budget, no early stopping,
references on a bounded subsample read from the start of the files.

``TrainingSettings.base_model`` (``--base-model``): a new head on a pretrained feature
extractor (models/cnn/base_model.py) instead of a CNN from scratch, optionally fine-tuned.
``TrainingSettings.warm_start`` (``--warm-start``): start from TFX's ``base_model`` (the latest
blessed model) when its recorded identity and weight shapes match (models/common/warm_start.py).
``TrainingSettings.family``: optional ``hparams``; the image shape comes with the data's facts
(models/cnn/hparams.py: CnnHyperparameters, the one typed object a tuner sets). A Tuner's
best values (TFX's ``hyperparameters`` channel, ``fn_args.hyperparameters``) override them
and the learning rate; ``training.json`` records what was used.
"""
import dataclasses
import functools
import json
import logging
import os
from typing import Any

import attr
import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs

from data.manifest import facts_in, image_shape_in
from models.cnn import base_model, byte_pixels, evaluation, export, features, kernel_head, preprocessing
from models.cnn import model as cnn_model
from models.cnn.hparams import LEARNING_RATE, CnnHyperparameters, with_tuned
from models.cnn.hparams import describe as describe_hparams
from models.common import raw_examples, references, regime
from models.common.distribution import make_strategy
from models.common.inputs import load_split, make_dataset
from models.common.multi_worker import export_dir
from models.common.search_space import values_of
from models.common.training import TrainingSettings, fit, tensorboard
from models.common.warm_start import WarmStarter, write_record

log = logging.getLogger(__name__)
GATE_REFERENCE = "logistic_regression"
TRAINING_FILE = "training.json"


@dataclasses.dataclass(frozen=True)
class _Data:
    """What the data fixes for this run: the image shape (from its facts), the classes (from the
    Transform output's vocabulary, in id order) and the transform graph its raw examples are read through."""

    image_shape: list[int]
    class_names: list[str]
    transform_output: tft.TFTransformOutput

    @classmethod
    def of(cls, fn_args: FnArgs, transform_output: tft.TFTransformOutput) -> "_Data":
        names = [v.decode() for v in transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
        return cls(image_shape_in(fn_args.custom_config), names, transform_output)

    def reader(self, keys: tuple[str, ...]):
        """The raw spec to parse of ExampleGen's examples and the function to the transformed ``keys``."""
        return raw_examples.reader(self.transform_output, features.RAW_INPUTS, keys)

    def byte_reader(self):
        """As ``reader``, to the raw pixels as bytes and the transformed label (models/cnn/byte_pixels.py)."""
        return byte_pixels.reader(self.transform_output)

    def inputs_of_bytes(self, keys: tuple[str, ...]):
        """Byte pixels -> the transformed ``keys`` (models/cnn/byte_pixels.py)."""
        return byte_pixels.to_inputs(self.transform_output, keys)

    def identity(self, base_model: str) -> dict[str, Any]:
        """What the weights are tied to: a later --warm-start reuses them only if all of it matches."""
        return {"family": "cnn", "image_shape": self.image_shape, "classes": self.class_names,
                "base_model": base_model}


def run_fn(fn_args: FnArgs) -> None:
    settings, hparams, tuned = _settings(fn_args)
    tf.keras.utils.set_random_seed(settings.seed)
    transform_output = tft.TFTransformOutput(fn_args.transform_output)
    data = _Data.of(fn_args, transform_output)
    strategy = make_strategy(settings.strategy)
    base = base_model.describe(settings.base_model) if settings.base_model else None
    warm = WarmStarter.for_trainer(settings.warm_start, fn_args, data.identity(settings.base_model), log)
    train, evaluation_split = _load_splits(fn_args, settings, data, base is not None)
    # The reference predictors fit in a thread while the CNN trains; the export waits for them.
    fitting_references = references.beside(_references, fn_args, data, train, evaluation_split, settings.seed)
    # In memory, Keras runs a run of steps per call (regime.STEPS_PER_EXECUTION); streamed, one, so that
    # --train-steps stops on the step (StopAtStep can end training only between calls).
    steps_per_execution = regime.STEPS_PER_EXECUTION if train is not None else 1
    build = functools.partial(_build, data, base, hparams, settings, strategy, warm, steps_per_execution)
    log.info("Training CNN %s -> %d classes, %s, global batch %d", data.image_shape, len(data.class_names),
             describe_hparams(hparams), settings.batch_size * strategy.num_replicas_in_sync)
    if train is not None:
        model, training = _train_in_memory(fn_args, settings, hparams, data, base, strategy, build, train)
    else:
        model, training = _train_streaming(fn_args, settings, hparams, data, strategy, build, base is not None)
    training.update(hparams=hparams.to_dict(), learning_rate=settings.learning_rate,
                    tuned=tuned)  # tuned: {} without a search, the values above are the defaults
    if base:
        training["base_model"] = dataclasses.asdict(base)
    refs, scored = fitting_references.result()
    log.info("Reference eval accuracy: %s", ", ".join(f"{k} {v:.4f}" for k, v in refs.items()))
    with export_dir(strategy, fn_args.serving_model_dir) as target:  # chief only (multi_worker.py)
        export.export_serving_model(model, transform_output, target, data.image_shape)
        references.write_references(target, evaluation.ACCURACY, refs, GATE_REFERENCE, settings.gate_margin,
                                    extra=scored)
        _write_json(os.path.join(target, references.ASSETS_EXTRA, TRAINING_FILE), training)
        write_record(target, data.identity(settings.base_model), warm.decision)


def _load_splits(fn_args: FnArgs, settings: TrainingSettings, data: _Data, on_base_model: bool):
    """The train and eval splits as arrays of the features this Trainer reads (the network's input, the
    references' standardised pixels, the label); a split whose transformed pixels exceed the regime's
    in-memory size (models/common/regime.py) as its raw pixels in bytes and the label
    (models/cnn/byte_pixels.py), and the eval split so too when the train split is; or None over that size
    even so; never in memory across workers (``TrainingSettings.input_options``).

    Where the ExampleGen's counts (the data's facts) already say the transformed pixels exceed the budget,
    the split is read as bytes straight away: a load abandoned at the budget had held that much, and the
    process kept it (docs/history/benchmarks-log.md, "Raw pixels in memory")."""
    keys = _trained_keys(on_base_model)
    spec, transform = data.reader(keys)
    budget = settings.input_options()["memory_budget_bytes"]
    budget = regime.IN_MEMORY_BYTES if budget is None else budget
    counts = facts_in(fn_args.custom_config).get("split_counts") or {}
    per_example = 8 + 4 * int(np.prod(data.image_shape)) * (len(keys) - 1)  # transformed: float pixels, a label
    over_budget = f"transformed they exceed the in-memory budget ({budget >> 20} MiB)"

    def load(files, name: str, why_bytes: str):
        if not why_bytes and budget > 0 and int(counts.get(name) or 0) * per_example > budget:
            why_bytes = over_budget
        split = None if why_bytes else load_split(files, spec, budget, transform, tensors=True)
        if split is None and budget > 0:
            byte_spec, to_bytes = data.byte_reader()
            split = load_split(files, byte_spec, budget, to_bytes, tensors=True)
            if split is not None:
                log.info("%s split held as raw pixels (%.0f MB): %s; transformed batch by batch as they are read",
                         name.capitalize(), byte_pixels.megabytes(split), why_bytes or over_budget)
        return split

    train = load(fn_args.train_files, "train", "")
    return train, load(fn_args.eval_files, "eval", "as the train split" if byte_pixels.holds_bytes(train) else "")


def _trained_keys(on_base_model: bool) -> tuple[str, ...]:
    """The transformed features training reads: the references' standardised pixels, the label and, on a
    base model, its [0, 1] pixels."""
    return (features.IMAGE_XF, features.LABEL_XF) + ((features.IMAGE_UNIT_XF,) if on_base_model else ())


def _settings(fn_args: FnArgs) -> tuple[TrainingSettings, CnnHyperparameters, dict[str, Any]]:
    """The training settings, the CNN's hyperparameters and the Tuner's values that overrode them."""
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tuned = values_of(fn_args.hyperparameters)
    hparams = with_tuned(CnnHyperparameters.from_family(settings.family), tuned)
    if LEARNING_RATE in tuned:
        settings = dataclasses.replace(settings, learning_rate=float(tuned[LEARNING_RATE]))
    return settings, hparams, tuned


def _build(data: _Data, base, hparams: CnnHyperparameters, settings: TrainingSettings, strategy, warm,
           steps_per_execution: int):
    """A fresh CNN (or a head on ``base``), warm-started when the decision says so."""
    def fresh():
        with strategy.scope():
            if base:
                return cnn_model.build_on_base_model(data.image_shape, len(data.class_names), base,
                                                     settings.learning_rate, hparams, jit_compile=settings.jit_compile,
                                                     steps_per_execution=steps_per_execution)
            return cnn_model.build_cnn(data.image_shape, len(data.class_names), settings.learning_rate, hparams,
                                       jit_compile=settings.jit_compile, steps_per_execution=steps_per_execution)

    return warm.build(fresh)


def _train_in_memory(fn_args: FnArgs, settings: TrainingSettings, hparams: CnnHyperparameters, data: _Data, base,
                     strategy, build, train) -> tuple[Any, dict[str, Any]]:
    """Early stopping on held-out train (models/common/regime.py), fine-tuning a base model if asked, then a
    kernel head where it helps; the model and what training.json records of it."""
    input_key = features.IMAGE_UNIT_XF if base else features.IMAGE_XF
    held_as_bytes = byte_pixels.holds_bytes(train)
    fit_on_train = functools.partial(
        regime.fit_with_holdout, y=train[features.LABEL_XF],
        x={byte_pixels.PIXELS: train[byte_pixels.PIXELS]} if held_as_bytes else {input_key: train[input_key]},
        transform=data.inputs_of_bytes((input_key,)) if held_as_bytes else None,
        batch_size=settings.batch_size * strategy.num_replicas_in_sync,
        min_steps=0 if settings.explicit_steps else hparams.min_steps, max_steps=fn_args.train_steps,
        patience_steps=hparams.patience_steps, holdout_fraction=hparams.holdout_fraction,
        num_classes=len(data.class_names), seed=settings.seed, scale_budget=not settings.explicit_steps,
        callbacks=[tensorboard(settings, fn_args.model_run_dir)], log=log.info)
    model, report = fit_on_train(build, class_weights=hparams.class_weights)
    training: dict[str, Any] = {"regime": "early_stopping", **report.to_dict()}
    if base and hparams.fine_tune:
        def unfrozen():
            with strategy.scope():
                return cnn_model.unfreeze_base(model, settings.learning_rate * hparams.fine_tune_lr_factor,
                                               settings.jit_compile, regime.STEPS_PER_EXECUTION)
        model, report = fit_on_train(unfrozen, class_weights="on" if report.class_weights else "off")
        training["fine_tune"] = report.to_dict()
    model, head = _with_kernel_head(model, report, train, input_key, hparams, len(data.class_names), settings.seed,
                                    base is not None)
    training["kernel_head"] = head.to_dict()
    return model, training


def _train_streaming(fn_args: FnArgs, settings: TrainingSettings, hparams: CnnHyperparameters, data: _Data, strategy,
                     build, on_base_model: bool) -> tuple[Any, dict[str, Any]]:
    """A train split too big for memory: streamed, no early stopping, for :func:`streamed_steps`."""
    global_batch = settings.batch_size * strategy.num_replicas_in_sync
    steps, why = streamed_steps(fn_args, settings, hparams, global_batch)
    log.info("Train split too big for memory: streaming %d steps (%s), no early stopping", steps, why)
    model = build()
    spec, transform = data.reader(_trained_keys(on_base_model))
    train = make_dataset(fn_args.train_files, spec, features.LABEL_XF, global_batch, seed=settings.seed,
                         transform=transform, **settings.input_options())
    held = make_dataset(fn_args.eval_files, spec, features.LABEL_XF, global_batch, shuffle=False,
                        repeat=True, transform=transform, **settings.input_options())
    fit(settings, model, train, held, attr.evolve(fn_args, train_steps=steps), log)
    return model, {"regime": "fixed_steps", "steps": steps, "epochs_run": settings.epochs}


def streamed_steps(fn_args: FnArgs, settings: TrainingSettings, hparams: CnnHyperparameters,
                   global_batch: int) -> tuple[int, str]:
    """The steps a streamed train split trains, and why: the TrainArgs steps when --train-steps set them;
    otherwise the in-memory regime's budget for the split's examples (``regime.schedule``: the passes, but at
    most ``STEPS_PER_SQRT_EXAMPLE`` x sqrt(examples) and at least ``min_steps``). The square root is about
    the data, not about where it is held: a bigger set gives more distinct examples per step, and with the
    passes alone a million 28x28 digits trained longer than TFX's example took for its whole run
    (docs/history/benchmarks-log.md, "A million digits beside TFX's example"). The examples are the
    ExampleGen's train count, from the data's facts."""
    if settings.explicit_steps:
        return fn_args.train_steps, "--train-steps"
    train_examples = int((facts_in(fn_args.custom_config).get("split_counts") or {}).get("train") or 0)
    if not train_examples:
        return fn_args.train_steps, "the passes: the data's facts hold no train count"
    plan = regime.schedule(train_examples, global_batch, min_steps=hparams.min_steps, max_steps=fn_args.train_steps,
                           patience_steps=hparams.patience_steps)
    return plan.budget, (f"the step budget of {train_examples:,} train examples: min({settings.epochs} passes, "
                         f"{regime.STEPS_PER_SQRT_EXAMPLE} x sqrt(examples)), at least {hparams.min_steps}")


def _with_kernel_head(model, report, train, input_key: str, hparams: CnnHyperparameters, num_classes: int,
                      seed: int, on_base_model: bool):
    """The trained CNN with a kernel head on its features where it helps (models/cnn/kernel_head.py),
    decided on the same held-out part of train that stopped the training. On a base model the
    input is [0, 1] pixels, standardised for the head as Transform does for a CNN from scratch.
    Not on a split held as bytes: the head reads every train example's transformed pixels at once,
    which is what did not fit."""
    if byte_pixels.holds_bytes(train):
        return model, kernel_head.KernelHeadReport(
            kept=False, why="train held as raw pixels: its transformed pixels exceed the in-memory budget")
    labels = np.asarray(train[features.LABEL_XF]).reshape(-1)
    fit_idx, held_idx = regime.stopping_holdout(labels, hparams.holdout_fraction, seed)
    return kernel_head.fit_and_select(
        model, train[input_key], labels, fit_idx, held_idx, num_classes,
        softmax_holdout_accuracy=report.holdout_accuracy, mode=hparams.kernel_head, seed=seed,
        pixel_floor=preprocessing.STD_FLOOR if on_base_model else None, log=log.info)


def _references(fn_args: FnArgs, data: _Data, train, evaluation_split, seed: int):
    """Reference accuracies on the in-memory splits, or on the first examples when streaming; and how
    many eval examples they were scored on, of how many (known in memory only)."""
    def head(patterns):
        spec, transform = data.reader((features.IMAGE_XF, features.LABEL_XF))
        batches = make_dataset(patterns, spec, features.LABEL_XF, 1024, shuffle=False, repeat=False,
                               cache=False, transform=transform)
        xs, ys, count = [], [], 0
        for x, y in batches:
            xs.append(x[features.IMAGE_XF].numpy())
            ys.append(y.numpy())
            count += len(ys[-1])
            if count >= references.MAX_TRAIN_EXAMPLES:
                break
        return {features.IMAGE_XF: np.concatenate(xs), features.LABEL_XF: np.concatenate(ys)}

    def sample(split, limit: int, sample_seed: int):
        """Of a split held as bytes, the examples ``classifier_references`` reads, transformed (it then
        takes them all: the same indices)."""
        if not byte_pixels.holds_bytes(split):
            return split
        indices = references.subsample(len(split[features.LABEL_XF]), limit, sample_seed)
        return byte_pixels.rows(split, indices, data.inputs_of_bytes((features.IMAGE_XF,)))

    train = sample(train, references.MAX_TRAIN_EXAMPLES, seed) if train is not None else head(fn_args.train_files)
    whole = evaluation_split is not None
    evaluation_split = evaluation_split if whole else head(fn_args.eval_files)
    count = len(np.asarray(evaluation_split[features.LABEL_XF]).reshape(-1))
    evaluation_split = sample(evaluation_split, references.MAX_EVAL_EXAMPLES, seed + 1)
    scored = {"eval_examples": references.eval_examples_scored(count)}
    if whole:
        scored["eval_split_examples"] = count
    return references.classifier_references(
        train[features.IMAGE_XF], train[features.LABEL_XF],
        evaluation_split[features.IMAGE_XF], evaluation_split[features.LABEL_XF], seed=seed), scored


def _write_json(path: str, payload) -> None:
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(payload, indent=2, sort_keys=True, default=float) + "\n")

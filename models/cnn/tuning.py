"""The CNN's ``tuner_fn`` for TFX's Tuner (referenced by dotted path, like ``run_fn``).

A trial builds the same model the Trainer builds (``models/cnn/model.py``) from
``CnnHyperparameters`` with the trial's values, trains it for the Tuner's TrainArgs steps on
a bounded subsample of the TRAIN split (raw examples through the transform graph, as the
Trainer reads them) and scores accuracy on a stratified held-out part of
it: the eval split stays untouched for the Evaluator's gate, as in the Trainer
(``models/common/regime.py``). The search space is ``hparams.search_space``: with a
``--base-model`` it includes fine-tuning, and a trial that fine-tunes spends half its steps
on the head and half on the unfrozen base, as the Trainer's two phases do.
"""
import logging

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx.components.tuner.component import TunerFnResult

from data.manifest import image_shape_in
from models.cnn import base_model, features
from models.cnn import model as cnn_model
from models.cnn.hparams import LEARNING_RATE, CnnHyperparameters, search_space, with_tuned
from models.common import raw_examples, tuner
from models.common.inputs import make_dataset
from models.common.regime import STEPS_PER_EXECUTION, holdout_split
from models.common.training import TrainingSettings

log = logging.getLogger(__name__)
HOLDOUT_FRACTION = 0.2


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tuning = tuner.TuningSettings.from_custom_config(fn_args.custom_config)
    untuned = CnnHyperparameters.from_family(settings.family)
    image_shape = image_shape_in(fn_args.custom_config)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    num_classes = tf_transform_output.vocabulary_size_by_name(features.LABEL_VOCABULARY)
    base = base_model.describe(settings.base_model) if settings.base_model else None
    input_key = features.IMAGE_UNIT_XF if base else features.IMAGE_XF

    spec, transform = raw_examples.reader(tf_transform_output, features.RAW_INPUTS, (input_key, features.LABEL_XF))
    data = tuner.head_examples(make_dataset(fn_args.train_files, spec, features.LABEL_XF, 1024, shuffle=False,
                                            repeat=False, cache=False, transform=transform),
                               tuning.max_examples)
    x, y = data[input_key], np.asarray(data["__label__"]).reshape(-1)
    fit_idx, held_idx = holdout_split(y, HOLDOUT_FRACTION, tuning.seed)
    fit = tf.data.Dataset.from_tensor_slices(({input_key: x[fit_idx]}, y[fit_idx])).shuffle(
        len(fit_idx), seed=tuning.seed).repeat().batch(settings.batch_size)
    held = tf.data.Dataset.from_tensor_slices(({input_key: x[held_idx]}, y[held_idx])).batch(256)
    log.info("Tuning the CNN on %d train examples, scored on %d held-out ones", len(fit_idx), len(held_idx))

    def trial(values, steps: int) -> float:
        tf.keras.backend.clear_session()
        tf.keras.utils.set_random_seed(settings.seed)
        hparams = with_tuned(untuned, values)
        learning_rate = float(values.get(LEARNING_RATE, settings.learning_rate))
        if base:
            model = cnn_model.build_on_base_model(image_shape, num_classes, base, learning_rate, hparams,
                                                  steps_per_execution=STEPS_PER_EXECUTION)
        else:
            model = cnn_model.build_cnn(image_shape, num_classes, learning_rate, hparams,
                                        steps_per_execution=STEPS_PER_EXECUTION)
        fit_trial(model, fit, steps, hparams.fine_tune and base is not None,
                  learning_rate * hparams.fine_tune_lr_factor)
        return float(model.evaluate(held, verbose=0, return_dict=True)["accuracy"])

    search = tuner.BudgetedTuner(tuner.make_oracle(tuning, search_space(base is not None)), trial,
                                 steps=fn_args.train_steps, default_values={}, budget_seconds=tuning.budget_seconds,
                                 directory=fn_args.working_dir)
    return TunerFnResult(tuner=search, fit_kwargs={})


def fit_trial(model: tf.keras.Model, data: tf.data.Dataset, steps: int, fine_tune: bool,
              fine_tune_learning_rate: float) -> None:
    """Train a trial for ``steps`` steps; with ``fine_tune``, the first half on the head (base
    frozen) and the second on the unfrozen base, so a trial is scored on what the Trainer's two
    phases would give."""
    head_steps = max(1, steps // 2) if fine_tune else steps
    model.fit(data, steps_per_epoch=head_steps, epochs=1, verbose=0)
    if fine_tune and steps > head_steps:
        cnn_model.unfreeze_base(model, fine_tune_learning_rate, steps_per_execution=STEPS_PER_EXECUTION)
        model.fit(data, steps_per_epoch=steps - head_steps, epochs=1, verbose=0)

"""The seq2seq family's ``tuner_fn`` for TFX's Tuner (referenced by dotted path).

A trial builds the Trainer's model (``build_seq2seq``) with the trial's settings, trains it
for the Tuner's TrainArgs steps on a bounded subsample of the TRAIN windows and scores
the next-token top-5 accuracy (the gate's metric, ``FirstTokenTopK``) on the last windows
of that subsample.
Why the tail and not random windows: windows overlap (data/text_split.py), so a random
window would share most of its words with training ones; a gap of windows between the two
parts keeps them apart. The eval split stays untouched for the Evaluator's gate.
"""
import logging

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs
from tfx.components.tuner.component import TunerFnResult

from models.common import tuner
from models.common.inputs import make_dataset
from models.common.training import TrainingSettings
from models.seq2seq import features
from models.seq2seq.hparams import LEARNING_RATE, SEARCH_SPACE
from models.seq2seq.model import build_seq2seq
from models.seq2seq.trainer import model_settings

log = logging.getLogger(__name__)
HOLDOUT_FRACTION = 0.15
#: Windows dropped between the fitted part and the held-out tail (stride 2 words, so a
#: 16+4-word window shares words with the next ~10).
GAP_WINDOWS = 16


def holdout_tail(count: int) -> tuple[np.ndarray, np.ndarray]:
    """(fit, held-out) indices: the last ``HOLDOUT_FRACTION`` held out, ``GAP_WINDOWS`` dropped between."""
    held = max(1, int(count * HOLDOUT_FRACTION))
    fit_end = max(1, count - held - GAP_WINDOWS)
    return np.arange(fit_end), np.arange(count - held, count)


def tuner_fn(fn_args: FnArgs) -> TunerFnResult:
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tuning = tuner.TuningSettings.from_custom_config(fn_args.custom_config)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_graph_path)
    vocab_size = tf_transform_output.vocabulary_size_by_name(features.VOCABULARY) + features.NUM_OOV_BUCKETS
    spec = tf_transform_output.transformed_feature_spec()
    context_tokens, target_tokens = spec[features.CONTEXT_XF].shape[0], spec[features.TARGET_XF].shape[0]

    data = tuner.head_examples(make_dataset(fn_args.train_files, spec, features.TARGET_XF, 1024, shuffle=False,
                                            repeat=False, cache=False), tuning.max_examples)
    inputs = {key: data[key] for key in (features.CONTEXT_XF, features.DECODER_INPUT_XF)}
    target = data["__label__"]
    weights = (target != features.PAD_ID).astype(np.float32)
    fit_idx, held_idx = holdout_tail(len(target))

    def part(idx):
        return {k: v[idx] for k, v in inputs.items()}, target[idx], weights[idx]

    fit = tf.data.Dataset.from_tensor_slices(part(fit_idx)).shuffle(len(fit_idx), seed=tuning.seed).repeat().batch(
        settings.batch_size)
    held = tf.data.Dataset.from_tensor_slices(part(held_idx)).batch(256)
    log.info("Tuning seq2seq on %d train windows, scored on the %d after them", len(fit_idx), len(held_idx))

    def trial(values, steps: int) -> float:
        tf.keras.backend.clear_session()
        tf.keras.utils.set_random_seed(settings.seed)
        hyper = model_settings({**settings.family, **{k: v for k, v in values.items() if k != LEARNING_RATE}})
        learning_rate = float(values.get(LEARNING_RATE, settings.learning_rate))
        model = build_seq2seq(vocab_size, context_tokens, target_tokens, learning_rate, total_steps=steps, **hyper)
        model.fit(fit, steps_per_epoch=steps, epochs=1, verbose=0)
        return float(model.evaluate(held, verbose=0, return_dict=True)["next_token_top5"])

    search = tuner.BudgetedTuner(tuner.make_oracle(tuning, SEARCH_SPACE), trial, steps=fn_args.train_steps,
                                 default_values={}, budget_seconds=tuning.budget_seconds,
                                 directory=fn_args.working_dir)
    return TunerFnResult(tuner=search, fit_kwargs={})

"""KerasTuner search over this project's tf_keras models, for TFX's Tuner component.

Why not ``keras_tuner.RandomSearch`` & co.: KerasTuner 1.4.8 picks its Keras by ``import
keras``, which is Keras 3 here (installed beside tf_keras), so it runs in multi-backend
mode: its fit callbacks, ``clear_session`` and model saving act on Keras 3, not on the
tf_keras models TFT/TFMA 1.16 need (``stackenv``). So KerasTuner does what is
framework-free: its oracles (random search, Bayesian optimisation, Hyperband) choose each
trial's values, keep the trial records and, across processes, serve trials over gRPC
(``KERASTUNER_TUNER_ID`` / ``KERASTUNER_ORACLE_IP`` / ``KERASTUNER_ORACLE_PORT``); a trial
itself is the family's own function (``trial_fn(values, steps) -> score``) training a
tf_keras model, :class:`BudgetedTuner` (a ``BaseTuner``) runs it. It also keeps the
search inside a wall-time budget and scores the untuned defaults once, for comparison.
"""
import logging
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stackenv.errors import ProjectError

import keras_tuner
import numpy as np
from keras_tuner.engine import base_tuner
from keras_tuner.engine import trial as trial_module

from models.common.search_space import ALGORITHMS, Knob, TuningSettings, values_of  # noqa: F401 (re-exported)

log = logging.getLogger(__name__)

OBJECTIVE = "score"
#: Hyperband's largest trial is this many times its smallest; a trial's steps scale with it.
HYPERBAND_MAX_EPOCHS = 4



def distributed() -> bool:
    """KerasTuner's distributed mode: a chief oracle serves trials (its documented env vars)."""
    return "KERASTUNER_ORACLE_IP" in os.environ


def is_chief() -> bool:
    return distributed() and "chief" in os.environ.get("KERASTUNER_TUNER_ID", "")


TrialFn = Callable[[dict[str, Any], int], float]


def hyperparameters(space: Sequence[Knob]) -> keras_tuner.HyperParameters:
    """The KerasTuner search space of a family's knobs (defaults kept as KerasTuner defaults)."""
    hp = keras_tuner.HyperParameters()
    for knob in space:
        if knob.kind == "choice" and all(isinstance(v, bool) for v in knob.values):
            # Choice would store False/True as 0/1 (bool is an int to it): the summary and the
            # best-hyperparameters file would say fine_tune=1.
            hp.Boolean(knob.name, default=knob.default)
        elif knob.kind == "choice":
            hp.Choice(knob.name, list(knob.values), default=knob.default)
        elif knob.kind == "int":
            assert knob.low is not None and knob.high is not None  # Knob compared them with the default
            hp.Int(knob.name, int(knob.low), int(knob.high), step=int(knob.step or 1), default=int(knob.default))
        else:
            hp.Float(knob.name, knob.low, knob.high, step=knob.step, sampling="log" if knob.log else "linear",
                     default=knob.default)
    return hp


def make_oracle(settings: TuningSettings, space: Sequence[Knob]) -> keras_tuner.Oracle:
    objective = keras_tuner.Objective(OBJECTIVE, direction="max")
    common = dict(objective=objective, hyperparameters=hyperparameters(space), seed=settings.seed,
                  tune_new_entries=False, allow_new_entries=False)
    if settings.algorithm == "random":
        return keras_tuner.oracles.RandomSearchOracle(max_trials=settings.trials, **common)
    if settings.algorithm == "bayesian":
        return keras_tuner.oracles.BayesianOptimizationOracle(
            max_trials=settings.trials, num_initial_points=min(2, settings.trials), **common)
    if settings.algorithm == "hyperband":
        oracle = keras_tuner.oracles.HyperbandOracle(max_epochs=HYPERBAND_MAX_EPOCHS, factor=2,
                                                     hyperband_iterations=1, **common)
        oracle.max_trials = settings.trials  # Hyperband sizes itself by epochs; --tune-trials still caps it
        return oracle
    raise ValueError(f"Unknown tuning algorithm {settings.algorithm!r}; known: {ALGORITHMS}")


class BudgetedTuner(base_tuner.BaseTuner):
    """Runs ``trial_fn`` for each trial the oracle hands out, within a wall-time budget.

    The budget is checked between trials (a running trial finishes), and never before one
    trial completed, so a search always has a best trial. ``trial_seconds``, ``default_score``
    and ``stopped_by_budget`` are what ``components/tuner.py`` records next to TFX's results.
    """

    def __init__(self, oracle: keras_tuner.Oracle, trial_fn: TrialFn, *, steps: int,
                 default_values: Mapping[str, Any] | None, budget_seconds: float = 0.0,
                 directory: str, project_name: str = "search"):
        super().__init__(oracle=oracle, directory=directory, project_name=project_name, overwrite=True)
        self.trial_fn = trial_fn
        self.steps = max(1, int(steps))
        self.default_values = dict(default_values) if default_values is not None else None
        self.budget_seconds = float(budget_seconds or 0.0)
        self.trial_seconds: dict[str, float] = {}
        self.default_score: float | None = None
        self.default_seconds: float | None = None
        self.stopped_by_budget = False

    def _trial_steps(self, values: Mapping[str, Any]) -> int:
        """Hyperband's ``tuner/epochs`` scales a trial's steps; other oracles use them all."""
        epochs = values.get("tuner/epochs")
        if not epochs:
            return self.steps
        return max(1, round(self.steps * epochs / HYPERBAND_MAX_EPOCHS))

    def run_trial(self, trial, *args, **kwargs):
        values = trial.hyperparameters.values
        start = time.monotonic()
        score = float(self.trial_fn(values_of(values), self._trial_steps(values)))
        self.trial_seconds[trial.trial_id] = time.monotonic() - start
        if not math.isfinite(score):
            raise keras_tuner.errors.FailedTrialError(f"trial {trial.trial_id} scored {score} (diverged)")
        log.info("Trial %s: score %.4f in %.1f s with %s", trial.trial_id, score,
                 self.trial_seconds[trial.trial_id], values_of(values))
        return {OBJECTIVE: score}

    def _score_defaults(self) -> None:
        if self.default_values is None:
            return
        start = time.monotonic()
        self.default_score = float(self.trial_fn(dict(self.default_values), self.steps))
        self.default_seconds = time.monotonic() - start
        log.info("Untuned defaults: score %.4f", self.default_score)

    def search(self, *args, **kwargs):
        # KerasTuner's own progress tables go to stdout; the trial log lines above say the same.
        self.oracle.verbose = kwargs.pop("verbose", 0)
        if is_chief():  # serves trials to the workers until they are done
            return super().search(*args, **kwargs)
        from models.common.autograph import convert_tf_keras

        convert_tf_keras(False)  # as the Trainer does: trials are small fits (models/common/autograph.py)
        start = time.monotonic()
        self.on_search_begin()
        if not distributed() or self.tuner_id == "tuner0":
            self._score_defaults()
        while True:
            elapsed = time.monotonic() - start
            if self.budget_seconds and self.trial_seconds and elapsed >= self.budget_seconds:
                self.stopped_by_budget = True
                log.info("Tuning budget of %.0f s used up after %d trials: keeping the best so far",
                         self.budget_seconds, len(self.trial_seconds))
                break
            self.pre_create_trial()
            trial = self.oracle.create_trial(self.tuner_id)
            if trial.status == trial_module.TrialStatus.STOPPED:
                break
            if trial.status == trial_module.TrialStatus.IDLE:
                time.sleep(0.1)
                continue
            self.on_trial_begin(trial)
            self._try_run_and_update_trial(trial, *args, **kwargs)
            self.on_trial_end(trial)
        self.on_search_end()

    def save_model(self, trial_id, model, step=0):  # trials keep no models: the Trainer trains the best
        pass


def head_examples(dataset, limit: int) -> dict[str, np.ndarray]:
    """Up to ``limit`` examples of a ``(features, label)`` dataset as numpy arrays (label: ``"__label__"``)."""
    columns: dict[str, list[np.ndarray]] = {}
    count = 0
    for features, label in dataset:
        for key, value in {**features, "__label__": label}.items():
            columns.setdefault(key, []).append(value.numpy())
        count += len(label)
        if count >= limit:
            break
    if not columns:
        raise ProjectError("The Tuner found no example in the transformed train split, so it has nothing to search "
                           "on. ExampleGen hashes each example (or document) into train:eval 4:1, so very small "
                           "data can leave the train split empty: add more data, then run again.")
    return {key: np.concatenate(parts)[:limit] for key, parts in columns.items()}

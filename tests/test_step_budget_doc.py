"""What the CLI reference says a run does with ``--epochs`` is what a run does.

docs/cli.md (generated from the parser) states each family's default passes and how its trainer reads them
when neither --epochs nor --train-steps is typed. These tests read that statement back from the page, build
the settings a run gets from ``pipeline run --model FAMILY`` with no other flag, and drive the trainers' own
decisions (the CNN's step schedule, its in-memory limit and streaming, the text model's early stopping) for a
small and a large training split: a change to the behaviour that leaves the page as it was fails here, and
so does a change to the page that the behaviour does not follow.
"""
import dataclasses
import math
import re
import types

import numpy as np
import pytest
from conftest import PROJECT_ROOT

from components.data_facts import pending_manifest
from components.data_facts import steps as facts_steps
from models.common.training import TrainingSettings
from pipeline.arguments import build_parser, config_from_args
from pipeline.families import get_family

#: Training split sizes: the bundled digits' train split, and 200,000 images' (4:1).
SMALL, LARGE = 1_437, 160_000
#: Text windows: a short document's train split.
SMALL_TEXT = 2_000


class _Reached(Exception):
    """Raised by a stand-in once the decision under test has been made: nothing trains."""


def _epochs_row() -> str:
    page = (PROJECT_ROOT / "docs" / "cli.md").read_text()
    run = page.split("\n## run\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in run.splitlines() if line.startswith("| `--epochs EPOCHS` |")]
    assert len(rows) == 1, "docs/cli.md's run section has no single --epochs row"
    return " ".join(rows[0].split())


def _stated(pattern: str) -> re.Match:
    found = re.search(pattern, _epochs_row())
    assert found, f"docs/cli.md's --epochs row no longer says {pattern!r}: update this test with the page"
    return found


def _cnn_statement() -> dict[str, int]:
    found = _stated(r"cnn (\d+) \(while the train split fits in (\d+) GiB, transformed or as one byte a pixel: a "
                    r"step budget of min\(these passes, (\d+) x sqrt\(examples it fits on\)\) steps but at least "
                    r"(\d+), stopped early on held-out train; a larger split: the same budget on all its examples, "
                    r"not stopped early, streamed\)")
    passes, gib, per_sqrt, at_least = (int(value) for value in found.groups())
    return {"passes": passes, "memory_bytes": gib << 30, "per_sqrt": per_sqrt, "at_least": at_least}


def _seq2seq_statement() -> dict[str, int]:
    found = _stated(r"seq2seq (\d+) \(at most, and (\d+) steps or (\d+) minutes of training at most: the held-out "
                    r"top-5 is checked that many times, evenly, training stops early after (\d+) checks without a "
                    r"better one, and the best is kept\)")
    passes, max_steps, minutes, patience = (int(value) for value in found.groups())
    return {"passes": passes, "max_steps": max_steps, "minutes": minutes, "patience": patience}


def _run_without_flags(family: str) -> tuple[TrainingSettings, dict]:
    """The Trainer's settings, as the run_fn reads them back, for ``pipeline run --model FAMILY``."""
    from pipeline.graph import _training_settings

    config = config_from_args(build_parser().parse_args(["run", "--model", family]))
    assert config.train_steps is None
    custom_config = _training_settings(config, get_family(family), pending_manifest(config.data)).to_custom_config()
    return TrainingSettings.from_custom_config(custom_config), custom_config


def _train_args_steps(custom_config: dict, train_examples: int) -> int:
    """The TrainArgs steps of a run that reads --data itself: its executor fills them from the data's facts
    (components/facts_steps.py FactsTrainerExecutor)."""
    training = custom_config["training"]
    return facts_steps(0, train_examples, int(training["batch_size"]), int(training["epochs"]))


def test_the_reference_states_each_familys_default_passes_as_the_parser_sets_them():
    for family, statement in (("cnn", _cnn_statement()), ("seq2seq", _seq2seq_statement())):
        config = config_from_args(build_parser().parse_args(["run", "--model", family]))
        assert config.epochs == statement["passes"] == get_family(family).defaults.epochs, family
        settings, _ = _run_without_flags(family)
        assert (settings.epochs, settings.explicit_steps) == (statement["passes"], False), family


@pytest.mark.parametrize("train_examples", [SMALL, LARGE])
def test_the_cnn_step_budget_is_the_one_the_reference_states(monkeypatch, tmp_path, train_examples):
    from models.cnn import trainer
    from models.cnn.hparams import CnnHyperparameters
    from models.common import regime

    stated = _cnn_statement()
    settings, custom_config = _run_without_flags("cnn")
    hparams = CnnHyperparameters.from_family(settings.family)
    train_steps = _train_args_steps(custom_config, train_examples)
    assert train_steps == stated["passes"] * math.ceil(train_examples / settings.batch_size)  # "these passes"

    planned = {}
    real_schedule = regime.schedule

    def schedule(fit_examples, batch_size, **kwargs):
        planned.update(fit_examples=fit_examples, plan=real_schedule(fit_examples, batch_size, **kwargs))
        raise _Reached

    monkeypatch.setattr(regime, "schedule", schedule)
    labels = np.arange(train_examples) % 10
    train = {trainer.features.IMAGE_XF: np.zeros((train_examples, 1), np.float32),
             trainer.features.LABEL_XF: labels.reshape(-1, 1)}
    data = trainer._Data(image_shape=[28, 28, 1], class_names=[str(i) for i in range(10)], transform_output=None)
    fn_args = types.SimpleNamespace(train_steps=train_steps, model_run_dir=str(tmp_path))
    strategy = types.SimpleNamespace(num_replicas_in_sync=1)
    with pytest.raises(_Reached):
        trainer._train_in_memory(fn_args, settings, hparams, data, None, strategy, lambda: None, train)

    fit_examples, plan = planned["fit_examples"], planned["plan"]
    assert 0 < fit_examples < train_examples  # "examples it fits on": train less its held-out part
    stated_budget = max(stated["at_least"], min(train_steps, math.ceil(stated["per_sqrt"] * math.sqrt(fit_examples))))
    assert plan.budget == stated_budget
    assert plan.epochs * plan.steps_per_check >= plan.budget  # the whole budget can be trained
    assert plan.min_epochs * plan.steps_per_check >= stated["at_least"]  # no stop before "at least"
    if train_examples == LARGE:
        assert plan.budget < train_steps  # the square root bounds it, not the passes
        assert plan.patience < plan.epochs - plan.min_epochs  # early stopping can end it
    else:
        assert plan.budget == stated["at_least"] > train_steps  # at least, even past the passes


def test_the_cnn_in_memory_limit_and_the_streamed_budget_are_the_stated_ones(monkeypatch, tmp_path):
    from models.cnn import trainer
    from models.common import regime

    stated = _cnn_statement()
    settings, custom_config = _run_without_flags("cnn")
    assert regime.IN_MEMORY_BYTES == stated["memory_bytes"]
    budgets = []
    monkeypatch.setattr(trainer, "load_split", lambda files, spec, budget, transform, tensors: budgets.append(budget))
    fn_args = types.SimpleNamespace(train_files=["train"], eval_files=["eval"], custom_config=custom_config)
    # What is parsed and how: tests/test_raw_examples.py and, as byte pixels, tests/test_byte_pixels.py.
    data = types.SimpleNamespace(reader=lambda keys: ({}, None), byte_reader=lambda: ({}, None),
                                 image_shape=[32, 32, 3])
    assert trainer._load_splits(fn_args, settings, data, False) == (None, None)
    assert budgets == [stated["memory_bytes"]] * 4  # a split over it even as bytes is not held: it streams

    # A train split too large for memory (a million 32x32x3 images): the same budget on all its examples, no
    # early stopping. Its examples are the ExampleGen's train count, handed over with the data's facts.
    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.cnn.hparams import CnnHyperparameters

    hparams = CnnHyperparameters.from_family(settings.family)
    train_steps = _train_args_steps(custom_config, 800_000)
    assert train_steps == stated["passes"] * math.ceil(800_000 / settings.batch_size)
    fitted = {}
    monkeypatch.setattr(trainer, "make_dataset", lambda *args, **kwargs: None)
    monkeypatch.setattr(trainer, "fit", lambda settings, model, train, held, fn_args, log, **kwargs: fitted.update(
        settings=settings, fn_args=fn_args, kwargs=kwargs))
    facts = {**custom_config, "data_facts": {"split_counts": {"train": 800_000, "eval": 200_000}}}
    fn_args = FnArgs(train_steps=train_steps, train_files=["train"], eval_files=["eval"], custom_config=facts)
    _, training = trainer._train_streaming(fn_args, settings, hparams, data,
                                           types.SimpleNamespace(num_replicas_in_sync=1), lambda: None, False)
    stated_budget = max(stated["at_least"], min(train_steps, math.ceil(stated["per_sqrt"] * math.sqrt(800_000))))
    assert training["regime"] == "fixed_steps" and training["steps"] == stated_budget < train_steps
    assert fitted["fn_args"].train_steps == stated_budget and not fitted["kwargs"].get("callbacks")
    assert fitted["fn_args"].eval_files == ["eval"]  # the rest of the Trainer's arguments as they came
    assert settings.epochs * settings.steps_per_epoch(stated_budget) >= stated_budget  # fit reaches every step
    # --train-steps: exactly those, streamed or not.
    explicit = dataclasses.replace(settings, explicit_steps=True)
    given = FnArgs(train_steps=123, train_files=["train"], eval_files=["eval"], custom_config=facts)
    trainer._train_streaming(given, explicit, hparams, data, types.SimpleNamespace(num_replicas_in_sync=1),
                             lambda: None, False)
    assert fitted["fn_args"].train_steps == 123


@pytest.mark.parametrize("train_windows", [SMALL_TEXT, 4_000_000])
def test_the_text_model_trains_the_stated_budget_and_stops_as_stated(monkeypatch, tmp_path, train_windows):
    from models.seq2seq import trainer

    stated = _seq2seq_statement()
    settings, custom_config = _run_without_flags("seq2seq")
    train_steps = _train_args_steps(custom_config, train_windows)
    per_pass = math.ceil(train_windows / settings.batch_size)
    assert train_steps == stated["passes"] * per_pass

    built = {}

    def best_weights(**kwargs):
        built.update(kwargs)
        raise _Reached

    monkeypatch.setattr(trainer, "make_dataset", lambda *args, **kwargs: None)
    monkeypatch.setattr(trainer, "teacher_forcing", lambda dataset: dataset)
    monkeypatch.setattr(trainer, "BestWeights", best_weights)
    warm = types.SimpleNamespace(build=lambda build: None)
    tokens = types.SimpleNamespace(vocab_size=100, context=8, target=1)
    fn_args = types.SimpleNamespace(train_steps=train_steps)
    with pytest.raises(_Reached):
        trainer._train(fn_args, settings, {}, tokens, {}, types.SimpleNamespace(num_replicas_in_sync=1), warm,
                       "fit", "holdout", {"holdout": 100})
    budget = trainer.step_budget(settings, train_steps)
    assert budget == min(train_steps, stated["max_steps"])  # "and ... steps at most"
    if train_windows == SMALL_TEXT:
        assert budget == train_steps and settings.steps_per_epoch(budget) == per_pass  # a check after each pass
    else:
        assert budget == stated["max_steps"] < train_steps  # the cap, not the passes
    assert settings.epochs * settings.steps_per_epoch(budget) >= budget  # checked that many times, evenly
    assert built["patience"] == stated["patience"] < stated["passes"]  # it can stop early
    assert built["monitor"] == "val_next_token_top5"  # "a better held-out top-5"


def test_the_text_model_stops_at_the_stated_training_time(monkeypatch):
    """A default run ends training once the stated minutes have passed, mid-check if need be, and the cut check
    is still scored; --train-steps and multi-worker training are not timed."""
    import tensorflow as tf

    from models.common import callbacks
    from models.seq2seq import trainer

    stated = _seq2seq_statement()
    settings, _ = _run_without_flags("seq2seq")
    timer = trainer.time_budget(settings)
    assert timer is not None and timer.seconds == stated["minutes"] * 60
    assert trainer.time_budget(dataclasses.replace(settings, explicit_steps=True)) is None
    assert trainer.time_budget(dataclasses.replace(settings, strategy="multi_worker")) is None

    # A clock that moves a sixth of the budget, plus a second, at every step: the budget is crossed at step 6.
    now = [0.0]
    monkeypatch.setattr(callbacks, "time", types.SimpleNamespace(monotonic=lambda: now[0]))

    class Tick(tf.keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            now[0] += timer.seconds / 6 + 1

    model = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    x = np.ones((80, 2), np.float32)
    history = model.fit(x, x[:, :1], batch_size=8, epochs=3, steps_per_epoch=4, validation_data=(x, x[:, :1]),
                        callbacks=[Tick(), timer], verbose=0)
    assert timer.reached and timer.steps == 6
    assert history.epoch == [0, 1] and len(history.history["val_loss"]) == 2  # the cut check was scored

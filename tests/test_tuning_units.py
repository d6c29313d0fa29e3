"""The search machinery without a pipeline: option checks, hyperparameter files, the
budgeted KerasTuner loop (real oracles), and the typed hyperparameters a search sets."""
import json
import time

from stackenv.errors import ConfigError

import pytest
from conftest import run_cli

from models.cnn.hparams import SEARCH_SPACE as CNN_SPACE
from models.cnn.hparams import CnnHyperparameters, with_tuned
from models.common.search_space import TuningSettings, defaults, values_of
from models.seq2seq.hparams import SEARCH_SPACE as SEQ2SEQ_SPACE
from pipeline.config import PipelineConfig
from pipeline.tuning import read_hyperparameters, stage_hyperparameters


@pytest.mark.parametrize("settings, flag, phrase", [
    ({"tune_trials": 0}, "--tune-trials", "from 1 to 1000, got 0"),
    ({"tune_trials": -3}, "--tune-trials", "from 1 to 1000, got -3"),
    ({"tune_trials": 2, "tune_budget": 0}, "--tune-budget", "from 0.1 to 10080, got 0"),
    ({"tune_trials": 2, "tune_budget": 1e9}, "--tune-budget", "from 0.1 to 10080, got 1000000000.0"),
    ({"tune_trials": 2, "tune_budget": float("nan")}, "--tune-budget", "from 0.1 to 10080, got nan"),
    ({"tune_trials": 2, "tune_algorithm": "grid"}, "--tune-algorithm", "one of random, bayesian, hyperband"),
    ({"tune_trials": 2, "tune_steps": 0}, "--tune-steps", "from 1 to 1000000, got 0"),
    ({"tune_steps": 50}, "--tune-steps", "--tune-trials N"),
    ({"tune_algorithm": "random"}, "--tune-algorithm", "--tune-trials N"),
])
def test_impossible_tuning_options_name_their_flag(settings, flag, phrase):
    with pytest.raises(ConfigError) as error:
        PipelineConfig(**settings)
    message = str(error.value)
    assert message.startswith(flag) and phrase in message and "\n" not in message


def _file(tmp_path, content, name="best_hyperparameters.txt"):
    path = tmp_path / name
    path.write_text(json.dumps(content))
    return path


def test_hyperparameters_file_of_the_other_family_is_named(tmp_path):
    seq2seq_file = _file(tmp_path, {"space": [], "values": {"units": 64, "cell": "gru", "dropout": 0.2}})
    with pytest.raises(ConfigError) as error:
        PipelineConfig(model="cnn", hyperparameters_file=str(seq2seq_file))
    assert "seq2seq hyperparameters file" in str(error.value) and "--model seq2seq" in str(error.value)
    cnn_file = _file(tmp_path, {"filters": 32, "max_blocks": 2}, "cnn.json")
    with pytest.raises(ConfigError, match="cnn hyperparameters file"):
        PipelineConfig(model="seq2seq", hyperparameters_file=str(cnn_file))
    assert PipelineConfig(model="cnn", hyperparameters_file=str(cnn_file)).hyperparameters_file == str(cnn_file)


@pytest.mark.parametrize("content, phrase", [
    (None, "does not exist"), ("{not json", "not a JSON"), ({"values": {}}, "no hyperparameter values"),
    ({"values": {"bogus": 1}}, "not cnn hyperparameters"),
])
def test_bad_hyperparameters_files(tmp_path, content, phrase):
    path = tmp_path / "hp.json"
    if content is not None:
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ConfigError, match=phrase):
        read_hyperparameters(str(path), "cnn")
    with pytest.raises(ConfigError, match="cannot be combined"):
        PipelineConfig(tune_trials=2, hyperparameters_file=str(_file(tmp_path, {"filters": 8})))


def test_staged_file_is_content_addressed_and_alone_in_its_folder(tmp_path):
    a = stage_hyperparameters(str(_file(tmp_path, {"values": {"filters": 8}})), "cnn", str(tmp_path / "out"))
    again = stage_hyperparameters(str(_file(tmp_path, {"values": {"filters": 8}}, "copy.txt")), "cnn",
                                  str(tmp_path / "out"))
    other = stage_hyperparameters(str(_file(tmp_path, {"values": {"filters": 32}})), "cnn", str(tmp_path / "out"))
    assert a == again != other
    staged = list((tmp_path / "out" / "hyperparameters").glob("*/*"))
    assert len(staged) == 2 and all(p.name == "best_hyperparameters.txt" for p in staged)


def test_cli_refuses_bad_tuning_before_anything_runs(tmp_path):
    result = run_cli("run", "--output", tmp_path / "out", "--tune-trials", "0", timeout=300)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--tune-trials" in result.stdout + result.stderr and "Traceback" not in result.stdout + result.stderr
    assert not (tmp_path / "out" / "tfx").exists()


def test_search_spaces_hold_only_real_knobs():
    known = {f for f in CnnHyperparameters.__dataclass_fields__} | {"learning_rate"}
    assert set(defaults(CNN_SPACE)) <= known
    from models.seq2seq.trainer import MODEL_DEFAULTS

    assert set(defaults(SEQ2SEQ_SPACE)) <= set(MODEL_DEFAULTS) | {"learning_rate"}
    tuned = with_tuned(CnnHyperparameters(), {"filters": 32, "augment_strength": 0.0, "learning_rate": 0.01})
    assert tuned.filters == 32 and tuned.augmentations(32, 32) == ()
    assert CnnHyperparameters(augment_strength=0.2).augmentations(8, 8) == ("translate", "zoom")
    assert CnnHyperparameters().augmentations(8, 8) == ()  # untuned: auto, none below 16 px
    with pytest.raises(ValueError, match="Unknown CNN hyperparameters"):
        with_tuned(CnnHyperparameters(), {"cell": "gru"})
    assert values_of({"values": {"units": 64, "tuner/epochs": 2}}) == {"units": 64}


def _objective(values, steps):
    """A real score surface for the oracles: best at filters=32, dropout=0.1."""
    return steps / 100 - abs(values.get("filters", 16) - 32) / 100 - abs(values.get("dropout", 0.5) - 0.1)


@pytest.mark.parametrize("algorithm", ["random", "bayesian", "hyperband"])
def test_budgeted_tuner_runs_each_algorithm_and_scores_the_defaults(tmp_path, algorithm):
    from models.common import tuner

    steps_seen = []
    search = tuner.BudgetedTuner(
        tuner.make_oracle(TuningSettings(trials=3, algorithm=algorithm), CNN_SPACE),
        lambda values, steps: steps_seen.append(steps) or _objective(values, steps),
        steps=8, default_values={}, directory=str(tmp_path))
    search.search()
    completed = search.oracle.get_best_trials(10)
    assert len(completed) == 3 and len(search.trial_seconds) == 3
    assert search.default_score == _objective({}, 8) and not search.stopped_by_budget
    assert max(steps_seen) <= 8 and (min(steps_seen) < 8) == (algorithm == "hyperband")


def test_budget_stops_the_search_with_the_best_trial_so_far(tmp_path):
    from models.common import tuner

    def slow(values, steps):
        time.sleep(0.3)
        return _objective(values, steps)

    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=50), CNN_SPACE), slow, steps=10,
                                 default_values=None, budget_seconds=0.5, directory=str(tmp_path))
    search.search()
    assert search.stopped_by_budget and 1 <= len(search.trial_seconds) < 50
    assert search.get_best_hyperparameters()[0].values  # the best so far is there for the Trainer


@pytest.mark.parametrize("defaults_win", [False, True])
def test_search_record_hands_the_trainer_the_defaults_when_they_win(tmp_path, defaults_win):
    from components.tuner import write_search_record
    from models.common import tuner
    from pipeline.results.tuning_summary import lines

    def score(values, steps):  # {} = the untuned defaults
        return (2.0 if not values else 0.0) if defaults_win else _objective(values, steps) + (5.0 if values else 0.0)

    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=2), CNN_SPACE), score, steps=5,
                                 default_values={}, directory=str(tmp_path / "work"))
    search.search()
    best_dir, results_dir = tmp_path / "best", tmp_path / "results"
    best_dir.mkdir()
    results_dir.mkdir()
    best = search.get_best_hyperparameters()[0]
    (best_dir / "best_hyperparameters.txt").write_text(json.dumps(best.get_config()))   # what TFX writes
    trials = search.oracle.get_best_trials(2)
    (results_dir / "tuner_results.json").write_text(json.dumps(
        [{"trial_id": t.trial_id, "score": t.score, **t.hyperparameters.values} for t in trials]))
    record = write_search_record(search, str(results_dir), str(best_dir))
    written = json.loads((best_dir / "best_hyperparameters.txt").read_text())
    assert record["defaults_won"] is defaults_win and record["trials_completed"] == 2
    assert values_of(written) == ({} if defaults_win else best.values)
    assert read_hyperparameters(str(best_dir), "cnn") == written  # reusable either way
    summary = "\n".join(lines({**record, "best_file": "x"}, None, "Accuracy"))
    assert ("trained with the defaults" in summary) is defaults_win

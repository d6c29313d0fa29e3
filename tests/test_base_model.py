"""--base-model: a new head on a feature extractor this test builds (nothing downloads), and
one-paragraph errors for a module that is missing or is not an image feature extractor."""
import numpy as np
import pytest
import tensorflow as tf
from conftest import DIGIT_FACTS

from models.cnn import base_model, features
from models.cnn.hparams import CnnHyperparameters
from models.cnn.model import build_on_base_model, unfreeze_base


def _save_extractor(path: str, pooled: bool = True) -> str:
    """A tiny CNN feature extractor, images [batch, 16, 16, 3] in [0, 1] -> 8 features, saved as
    a plain SavedModel (Keras exports ``variables``/``trainable_variables``, as TF Hub expects)."""
    layers = [tf.keras.Input((16, 16, 3)), tf.keras.layers.Conv2D(8, 3, activation="relu")]
    if pooled:
        layers.append(tf.keras.layers.GlobalAveragePooling2D())
    tf.saved_model.save(tf.keras.Sequential(layers), path)
    return path


@pytest.fixture(scope="module")
def extractor_dir(tmp_path_factory):
    return _save_extractor(str(tmp_path_factory.mktemp("extractor") / "module"))


def test_describe_reads_the_module_input_size_and_feature_width(extractor_dir):
    info = base_model.describe(extractor_dir)
    assert (info.height, info.width, info.channels, info.features) == (16, 16, 3, 8)


def test_head_on_base_trains_then_fine_tunes_and_exports_one_saved_model(extractor_dir, tmp_path):
    info = base_model.describe(extractor_dir)
    model = build_on_base_model((8, 8, 1), 3, info, hparams=CnnHyperparameters(dropout=0.0))
    assert model.input_names == [features.IMAGE_UNIT_XF]
    base_weights = model.get_layer("base_model").get_weights()[0].copy()
    rng = np.random.RandomState(1)
    y = rng.randint(0, 3, 64)
    x = (rng.rand(64, 64) * 0.2 + y[:, None] * 0.3).astype(np.float32)
    model.fit(x, y, epochs=2, batch_size=16, verbose=0)
    np.testing.assert_array_equal(model.get_layer("base_model").get_weights()[0], base_weights)  # frozen
    unfreeze_base(model, 1e-3)
    model.fit(x, y, epochs=1, batch_size=16, verbose=0)
    assert not np.allclose(model.get_layer("base_model").get_weights()[0], base_weights)
    export_dir = str(tmp_path / "export")
    tf.saved_model.save(model, export_dir)
    del model
    reloaded = tf.saved_model.load(export_dir)  # the module's variables are inside: no base dir needed
    assert reloaded(tf.constant(x[:2])).shape == (2, 3)


def test_missing_base_model_is_one_paragraph(tmp_path):
    with pytest.raises(base_model.BaseModelError) as error:
        base_model.describe(str(tmp_path / "nope"))
    message = str(error.value)
    assert "does not exist" in message and "SavedModel" in message and "\n" not in message


def test_a_module_that_is_not_a_feature_extractor_is_refused(tmp_path):
    path = _save_extractor(str(tmp_path / "maps"), pooled=False)
    with pytest.raises(base_model.BaseModelError, match="is not an image feature extractor: it returns"):
        base_model.describe(path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(base_model.BaseModelError, match="is not a readable SavedModel"):
        base_model.describe(str(tmp_path / "empty"))


def test_cli_refuses_a_missing_base_model_before_tfx_starts(tmp_path):
    from conftest import run_cli

    result = run_cli("run", "--output", tmp_path / "out", "--base-model", tmp_path / "no-such-module", timeout=600)
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "--base-model" in result.stderr and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr and "▶ ImportExampleGen" not in result.stderr


@pytest.mark.parametrize("fine_tune", [False, True])
def test_a_tuner_trial_fine_tunes_the_base_only_when_its_values_say_so(extractor_dir, fine_tune):
    from models.cnn.hparams import SCRATCH_SPACE, search_space
    from models.cnn.tuning import fit_trial
    from models.common.search_space import names

    assert {"fine_tune", "fine_tune_lr_factor"} <= set(names(search_space(True)))
    assert not {"fine_tune", "fine_tune_lr_factor"} & set(names(search_space(False)))
    assert search_space(False) == SCRATCH_SPACE
    info = base_model.describe(extractor_dir)
    model = build_on_base_model((8, 8, 1), 3, info, hparams=CnnHyperparameters(dropout=0.0))
    base_weights = model.get_layer("base_model").get_weights()[0].copy()
    rng = np.random.RandomState(2)
    y = rng.randint(0, 3, 64)
    x = (rng.rand(64, 64) * 0.2 + y[:, None] * 0.3).astype(np.float32)
    data = tf.data.Dataset.from_tensor_slices(({features.IMAGE_UNIT_XF: x}, y)).repeat().batch(16)
    fit_trial(model, data, steps=6, fine_tune=fine_tune, fine_tune_learning_rate=1e-2)
    moved = not np.allclose(model.get_layer("base_model").get_weights()[0], base_weights)
    assert moved == fine_tune


def test_a_search_over_fine_tuning_hands_the_trainer_a_boolean(tmp_path):
    from models.cnn.hparams import search_space, with_tuned
    from models.common import tuner
    from models.common.search_space import TuningSettings

    seen = []
    search = tuner.BudgetedTuner(tuner.make_oracle(TuningSettings(trials=4, seed=3), search_space(True)),
                                 lambda values, steps: seen.append(values.get("fine_tune", False))
                                 or float(values.get("fine_tune", False)),
                                 steps=2, default_values={}, directory=str(tmp_path))
    search.search()
    assert {type(value) for value in seen} == {bool} and True in seen   # not 0/1
    best = search.get_best_hyperparameters()[0].values
    assert best["fine_tune"] is True
    assert with_tuned(CnnHyperparameters(), best).fine_tune is True


def test_the_trainer_fine_tunes_when_a_search_chose_it_and_records_both_fits(extractor_dir, trainer_digits,
                                                                              tmp_path):
    """run_fn on a base model with the Tuner's {"fine_tune": True}: the fine-tuning fit is
    recorded, the search's values stay the search's values in training.json, one model exports."""
    import json

    from tfx.components.trainer.fn_args_utils import FnArgs

    from models.cnn.trainer import run_fn
    from models.common.training import TrainingSettings

    settings = TrainingSettings(batch_size=16, learning_rate=3e-3, base_model=extractor_dir)
    serving = tmp_path / "serving"
    run_fn(FnArgs(**trainer_digits, transform_graph_path=trainer_digits["transform_output"],
                  serving_model_dir=str(serving), model_run_dir=str(tmp_path / "run"), train_steps=60,
                  eval_steps=2, custom_config={**settings.to_custom_config(), **DIGIT_FACTS},
                  hyperparameters={"values": {"fine_tune": True}}))
    training = json.loads((serving / "assets.extra" / "training.json").read_text())
    assert training["tuned"] == {"fine_tune": True} and training["hparams"]["fine_tune"] is True
    assert training["fine_tune"]["epochs_run"] >= 1 and "kernel_head" in training
    assert "serving_default" in tf.saved_model.load(str(serving)).signatures

"""A diverged model is never a model: training stops with a paragraph, and the Pusher refuses nan metrics."""
import logging
import os

from stackenv.errors import ProjectError

import numpy as np
import pytest
import tensorflow as tf

from components.pusher import non_finite_metrics
from models.common.training import NonFiniteLoss, TrainingSettings, check_finite_loss, fit


class _FnArgs:
    def __init__(self, tmp_path):
        self.train_steps, self.eval_steps, self.model_run_dir = 4, 1, str(tmp_path)


def test_fit_stops_at_the_first_nan_loss_with_a_paragraph(tmp_path):
    model = tf.keras.Sequential([tf.keras.Input((2,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.array([[np.nan, 1.0]] * 8, "float32")
    data = tf.data.Dataset.from_tensor_slices((x, np.ones((8, 1), "float32"))).batch(2).repeat()
    with pytest.raises(NonFiniteLoss) as raised:
        settings = TrainingSettings(epochs=2, learning_rate=0.5)
        fit(settings, model, data, data, _FnArgs(tmp_path), logging.getLogger("test"))
    assert isinstance(raised.value, ProjectError)
    assert "--learning-rate" in raised.value.paragraph and "nan" in raised.value.paragraph


class _History:
    def __init__(self, history):
        self.history = history


def test_only_a_non_finite_loss_stops_training():
    """Finite losses pass (a nan accuracy is no loss); a nan val_loss in epoch 2 is named with its epoch."""
    finite = {"loss": [1.0, 0.5], "val_loss": [0.7, 0.6], "accuracy": [0.5, float("nan")]}
    assert check_finite_loss(_History(finite), 1e-3) is None
    with pytest.raises(NonFiniteLoss) as raised:
        check_finite_loss(_History({**finite, "val_loss": [0.7, float("inf")]}), 1e-3)
    assert "the val_loss became inf in epoch 2" in raised.value.paragraph
    assert "learning rate (0.001)" in raised.value.paragraph


@pytest.mark.parametrize("metrics, expected", [
    ({"sparse_categorical_accuracy": "NaN", "example_count": 10.0}, ["sparse_categorical_accuracy"]),
    ({"loss": float("inf"), "accuracy": 0.9}, ["loss"]),
    ({"accuracy": 0.9, "note": None}, []),
])
def test_pusher_names_non_finite_metrics(metrics, expected):
    assert non_finite_metrics(metrics) == expected


def _saved_model_with(value: float, root) -> str:
    """A real SavedModel (TFX Model layout: <uri>/Format-Serving) whose one weight holds ``value``."""
    module = tf.Module()
    module.weights = tf.Variable([1.0, value, 2.0], name="dense_kernel")
    module.apply = tf.function(lambda x: x * module.weights[0], input_signature=[tf.TensorSpec([None], tf.float32)])
    tf.saved_model.save(module, str(root / "Format-Serving"))
    return str(root)


def _truncate_variables(model_uri: str) -> None:
    data = os.path.join(model_uri, "Format-Serving", "variables", "variables.data-00000-of-00001")
    with open(data, "rb") as handle:
        content = handle.read()
    with open(data, "wb") as handle:
        handle.write(content[:len(content) // 2])


@pytest.mark.parametrize("value, truncated, reason", [
    (float("nan"), False, "holds nan or infinite values in 1 variable(s) (weights)"),
    (float("-inf"), False, "holds nan or infinite values in 1 variable(s) (weights)"),
    (0.5, True, "Cannot load the SavedModel in"),
])
def test_pusher_refuses_a_blessed_model_whose_weights_are_not_finite_or_unreadable(tmp_path, value, truncated,
                                                                                    reason):
    from test_serving_dir import _run_pusher

    from artifacts import serving_dir
    from components.pusher import NOT_PUSHED_REASON

    model_uri = _saved_model_with(value, tmp_path / "model")
    if truncated:
        _truncate_variables(model_uri)
    base = str(tmp_path / "serving")
    pushed = _run_pusher(model_uri, base, True, tmp_path)
    assert pushed.get_int_custom_property("pushed") == 0
    assert reason in pushed.get_string_custom_property(NOT_PUSHED_REASON)
    assert serving_dir.list_versions(base) == [] and not os.path.exists(base)


def test_pusher_pushes_the_same_model_with_finite_weights(tmp_path):
    from test_serving_dir import _run_pusher

    from artifacts import serving_dir

    base = str(tmp_path / "serving")
    pushed = _run_pusher(_saved_model_with(0.5, tmp_path / "model"), base, True, tmp_path)
    assert pushed.get_int_custom_property("pushed") == 1
    assert len(serving_dir.list_versions(base)) == 1

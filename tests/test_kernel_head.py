"""The CNN's kernel head (models/cnn/kernel_head.py): the served graph computes what was fitted,
the held-out comparison decides, the export serves it, and a later warm start still finds the
trained network inside it. Runs on real transformed digits (the session's Transform fixture)."""
import numpy as np
import pytest
import tensorflow as tf
from sklearn.metrics.pairwise import rbf_kernel

from models.cnn import export, features, kernel_head
from models.cnn.model import build_cnn
from models.common import regime
from models.common.warm_start import WarmStarter, write_record

SHAPE = (8, 8, 1)


@pytest.fixture(scope="module")
def trained(cnn_transform):
    """A CNN trained briefly on 300 transformed digits, with its held-out split."""
    tft_output, rows = cnn_transform
    x = np.stack([r[features.IMAGE_XF] for r in rows]).astype("float32")
    y = np.array([r[features.LABEL_XF] for r in rows]).reshape(-1)
    tf.keras.utils.set_random_seed(4)
    model = build_cnn(SHAPE, 10)
    model.fit({features.IMAGE_XF: x}, y, epochs=8, batch_size=32, verbose=0)
    fit_idx, held_idx = regime.holdout_split(y, 0.15, seed=0)
    return tft_output, model, x, y, fit_idx, held_idx


@pytest.mark.parametrize("pixel_floor", [None, 0.05])
def test_the_served_graph_computes_the_fitted_kernel_machine(trained, pixel_floor):
    _, model, x, y, fit_idx, held_idx = trained
    with_head, report = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, None, mode="on",
                                                   pixel_floor=pixel_floor)
    # 8x8 digits: two conv blocks, 16 then 32 filters, so 2x2x32 learned features.
    assert report.kept and report.centers == len(y) and report.dimensions == x.shape[1] + 2 * 2 * 32
    head = with_head.get_layer("probabilities_kernel")
    joined = tf.keras.Model(with_head.inputs, with_head.get_layer("kernel_inputs").output).predict(x, verbose=0)
    # The features the head sees are the network's last features, standardised, then the pixels
    # (standardised too when the model reads them unstandardised, as on a base model).
    pixels = x if pixel_floor is None else (x - x.mean(0)) / np.maximum(x.std(0), pixel_floor)
    np.testing.assert_allclose(joined[:, -x.shape[1]:], pixels, atol=1e-4)
    centers, alpha, gamma, temperature = (v.numpy() for v in (head.centers, head.alpha, head.gamma,
                                                               head.temperature))
    # The oracle is scikit-learn's RBF kernel, exp(-gamma * |a - b|^2), not the module's own helper:
    # gamma is scikit-learn's "scale" (1 / (features * variance)), and alpha solves kernel ridge
    # regression of the one-hot labels on the centres, (K + ridge * I) alpha = Y.
    assert float(gamma) == pytest.approx(1.0 / (joined.shape[1] * joined.var()), rel=1e-3)
    gram = rbf_kernel(centers.astype(np.float64), centers.astype(np.float64), gamma=float(gamma))
    np.testing.assert_allclose((gram + kernel_head.RIDGE * np.eye(len(centers))) @ alpha, np.eye(10)[y],
                               atol=2e-3)
    scores = rbf_kernel(joined, centers, gamma=float(gamma)) @ alpha
    expected = np.exp(temperature * scores - (temperature * scores).max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(with_head.predict(x, verbose=0), expected, atol=1e-4)
    # Kernel ridge on all of train with a small ridge reproduces the train labels.
    assert np.mean(expected.argmax(1) == y) > 0.99


def test_the_bar_is_the_softmax_minus_one_standard_error():
    assert kernel_head.kept_above(0.72, 68) == pytest.approx(0.72 - np.sqrt(0.72 * 0.28 / 68))
    assert kernel_head.kept_above(1.0, 45) == 1.0 and kernel_head.kept_above(0.95, 10_000) > 0.947


def test_auto_keeps_the_head_only_when_it_reaches_the_bar(trained, monkeypatch):
    _, model, x, y, fit_idx, held_idx = trained
    _, kept = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.0, mode="auto")
    assert kept.kept and kept.holdout_accuracy > 0.5
    seen = []
    monkeypatch.setattr(kernel_head, "kept_above",
                        lambda softmax, n: seen.append((softmax, n)) or kept.holdout_accuracy + 0.01)
    same, dropped = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.9, mode="auto")
    assert same is model and not dropped.kept and "softmax head was better" in dropped.why
    assert seen == [(0.9, len(held_idx))]
    monkeypatch.setattr(kernel_head, "kept_above", lambda softmax, n: kept.holdout_accuracy)
    with_head, at_the_bar = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.9, mode="auto")
    assert with_head is not model and at_the_bar.kept
    same, off = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.0, mode="off")
    assert same is model and not off.kept and off.holdout_accuracy is None


def test_auto_leaves_sets_bigger_than_its_centres_to_the_softmax(trained, monkeypatch):
    _, model, x, y, fit_idx, held_idx = trained
    monkeypatch.setattr(kernel_head, "MAX_CENTERS", 100)
    same, report = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.0, mode="auto")
    assert same is model and not report.kept and "more than the 100 centres" in report.why
    # Forced on, it keeps a seeded subsample of that size.
    with_head, forced = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, 0.0, mode="on")
    assert forced.kept and forced.centers == 100
    assert with_head.get_layer("probabilities_kernel").centers.shape[0] == 100


def test_the_export_serves_the_head_and_a_warm_start_restores_the_network_inside(trained, tmp_path):
    tft_output, model, x, y, fit_idx, held_idx = trained
    with_head, _ = kernel_head.fit_and_select(model, x, y, fit_idx, held_idx, 10, None, mode="on")
    target = str(tmp_path / "Format-Serving")
    export.export_serving_model(with_head, tft_output, target, SHAPE)
    served = tf.saved_model.load(target)
    # predict_image takes 0-255 pixels; the Transform layer inside standardises them as in training.
    pixels = np.random.RandomState(0).randint(0, 256, size=(4, *SHAPE)).astype(np.float32)
    outputs = served.signatures[export.PREDICT_IMAGE_SIGNATURE](images=tf.constant(pixels))
    transformed = tft_output.transform_features_layer()(
        {features.IMAGE: tf.constant(pixels.reshape(4, -1).astype(np.int64))})
    expected = with_head.predict(transformed[features.IMAGE_XF].numpy(), verbose=0)
    np.testing.assert_allclose(outputs["probabilities"].numpy(), expected, atol=1e-5)

    classes = [v.decode() for v in tft_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    identity = {"family": "cnn", "image_shape": list(SHAPE), "classes": classes}
    write_record(target, identity, WarmStarter(False, None, identity).decision)
    warm = WarmStarter(True, target, identity, lambda _: None)
    restored = warm.build(lambda: build_cnn(SHAPE, 10))
    assert warm.decision.source == target, warm.decision.note
    for mine, theirs in zip(restored.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(mine, theirs)

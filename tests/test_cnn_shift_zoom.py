"""Translate and zoom as one resample (models/cnn/shift_zoom.py) does what Keras' RandomTranslation
followed by RandomZoom does, with one interpolation instead of two.

The references are Keras' own layers, given ranges of one value each ((a, a): their uniform draw
returns a), so that both sides apply the same shift and zoom. On a linear ramp a bilinear resample
is exact, so away from the edges (where "nearest" fills) the pair's two resamples and the layer's
one must give the same pixels.
"""
import numpy as np
import pytest
import tensorflow as tf

from models.cnn.shift_zoom import RandomShiftZoom, resample, shift_zoom_matrix

SIZE = 16


def _ramp(count: int = 1) -> np.ndarray:
    """Images whose pixel (x, y) holds 3x + 5y + 1 (x the column), [count, SIZE, SIZE, 1]."""
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    return np.repeat((3 * x + 5 * y + 1)[None, :, :, None], count, axis=0)


@pytest.mark.parametrize("shift_fraction, zoom_delta", [((0.1, -0.05), 0.05), ((-0.08, 0.1), -0.1), ((0.0, 0.0), 0.0)])
def test_one_resample_matches_keras_translation_then_zoom(shift_fraction, zoom_delta):
    fraction_y, fraction_x = shift_fraction
    translate = tf.keras.layers.RandomTranslation((fraction_y, fraction_y), (fraction_x, fraction_x),
                                                  fill_mode="nearest")
    zoom = tf.keras.layers.RandomZoom((zoom_delta, zoom_delta), fill_mode="nearest")
    images = tf.constant(_ramp(2))
    pair = zoom(translate(images, training=True), training=True).numpy()

    column = lambda value: tf.constant([[value], [value]], tf.float32)  # noqa: E731 - two images
    matrix = shift_zoom_matrix(column(fraction_x * SIZE), column(fraction_y * SIZE), column(1.0 + zoom_delta),
                               tf.constant(float(SIZE)), tf.constant(float(SIZE)))
    once = resample(images, matrix).numpy()
    inner = slice(4, SIZE - 4)  # at most 1.6 px of shift and 0.8 px of zoom reach an edge's fill
    np.testing.assert_allclose(once[:, inner, inner], pair[:, inner, inner], atol=1e-3)
    if shift_fraction != (0.0, 0.0):  # the comparison sees the transform: the input itself differs
        assert not np.allclose(once[:, inner, inner], images.numpy()[:, inner, inner], atol=0.5)


def test_draws_cover_the_ranges_of_the_pair():
    """Read each image's shift and zoom back off a ramp: the centre pixel holds the centre minus the
    shift, neighbouring pixels differ by the zoom; every draw within the pair's ranges, spread over them."""
    factor, count = 0.1, 4000
    y, x = np.mgrid[0:SIZE, 0:SIZE].astype(np.float32)
    ramps = np.stack([x, y], axis=-1)[None].repeat(count, axis=0)  # channel 0: x, channel 1: y
    out = RandomShiftZoom(factor, seed=3)(tf.constant(ramps), training=True).numpy()
    centre = (SIZE - 1) / 2
    for channel, axis in ((0, 2), (1, 1)):  # [image, row, column]: x grows along columns, y along rows
        middle = out[:, 7:9, 7:9, channel].mean(axis=(1, 2))  # the centre, (7.5, 7.5), by symmetry
        shift = centre - middle
        step = np.diff(out[:, 6:10, 6:10, channel], axis=axis).mean(axis=(1, 2))
        assert np.all(np.abs(shift) <= factor * SIZE + 1e-3)
        assert shift.min() < -0.9 * factor * SIZE and shift.max() > 0.9 * factor * SIZE
        assert np.all((step >= 1 - factor - 1e-3) & (step <= 1 + factor + 1e-3))
        assert step.min() < 1 - 0.9 * factor and step.max() > 1 + 0.9 * factor
    x_step = np.diff(out[:, 6:10, 6:10, 0], axis=2).mean(axis=(1, 2))
    y_step = np.diff(out[:, 6:10, 6:10, 1], axis=1).mean(axis=(1, 2))
    np.testing.assert_allclose(x_step, y_step, atol=1e-3)  # one zoom for both axes, as RandomZoom(factor)


def test_inactive_unless_training_and_rebuilt_from_its_config():
    images = tf.constant(_ramp(3))
    layer = RandomShiftZoom(0.2, seed=1)
    np.testing.assert_array_equal(layer(images, training=False).numpy(), images.numpy())
    assert not np.allclose(layer(images).numpy(), images.numpy())  # like Keras' layers: training by default
    again = RandomShiftZoom.from_config(layer.get_config())
    assert (again.factor, again.seed) == (0.2, 1)

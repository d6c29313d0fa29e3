"""Random translation and zoom as one resample of each training image.

Keras' ``RandomTranslation`` followed by ``RandomZoom`` resamples every image twice, each a
projective transform on the CPU, and on small images the two were a large part of a training step
(docs/history/benchmarks-log.md, "One resample for translate and zoom"). Both are affine, so their
composition is one matrix and one resample. This layer draws what the two layers draw (a shift of up
to ``factor`` of the height and of the width, one zoom factor in [1 - factor, 1 + factor] for both
axes, seeded ops), composes them in that order (translate, then zoom) and resamples once: bilinear,
edges filled with the nearest pixel, as the pair does. The images differ from the pair's only by the
second interpolation's blur, which serving images never have.
"""
from __future__ import annotations

import tensorflow as tf


def shift_zoom_matrix(shift_x: tf.Tensor, shift_y: tf.Tensor, zoom: tf.Tensor,
                      height: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """The projective transforms (``[n, 8]``) of translating each image by ``(shift_x, shift_y)``
    pixels, then zooming it by ``zoom`` about its centre: output pixel ``(x, y)`` reads the input at
    ``(zoom * x + (width - 1) / 2 * (1 - zoom) - shift_x, ...)``, the translation matrix (Keras'
    ``get_translation_matrix``: ``x - shift_x``) applied to the zoom matrix's point (``get_zoom_matrix``).
    Each argument is ``[n, 1]``, float32."""
    zeros = tf.zeros_like(zoom)
    return tf.concat([zoom, zeros, (width - 1.0) / 2.0 * (1.0 - zoom) - shift_x,
                      zeros, zoom, (height - 1.0) / 2.0 * (1.0 - zoom) - shift_y,
                      zeros, zeros], axis=1)


def resample(images: tf.Tensor, transforms: tf.Tensor) -> tf.Tensor:
    """``images`` ``[n, h, w, c]`` resampled through ``transforms``: bilinear, the nearest pixel
    outside (the fill the project's augmentation layers use)."""
    return tf.raw_ops.ImageProjectiveTransformV3(
        images=images, transforms=transforms, output_shape=tf.shape(images)[1:3],
        fill_value=tf.constant(0.0, tf.float32), interpolation="BILINEAR", fill_mode="NEAREST")


@tf.keras.utils.register_keras_serializable(package="project_cnn")
class RandomShiftZoom(tf.keras.layers.Layer):
    """``RandomTranslation(factor, factor)`` then ``RandomZoom(factor)``, both ``fill_mode="nearest"``,
    as one resample; active only when training, like Keras' preprocessing layers (which also
    default to training when called outside ``fit``; the export passes ``training=False``)."""

    def __init__(self, factor: float, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.factor = float(factor)
        self.seed = int(seed)

    def call(self, images, training=True):
        if not training:
            return images
        images = tf.convert_to_tensor(images, self.compute_dtype)
        shape = tf.shape(images)
        count = shape[0]
        height = tf.cast(shape[1], tf.float32)
        width = tf.cast(shape[2], tf.float32)
        factor = self.factor
        shift_y = tf.random.uniform([count, 1], -factor, factor, seed=self.seed) * height
        shift_x = tf.random.uniform([count, 1], -factor, factor, seed=self.seed + 1) * width
        zoom = tf.random.uniform([count, 1], 1.0 - factor, 1.0 + factor, seed=self.seed + 2)
        output = resample(images, shift_zoom_matrix(shift_x, shift_y, zoom, height, width))
        output.set_shape(images.shape)
        return output

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "factor": self.factor, "seed": self.seed}

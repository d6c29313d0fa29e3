"""Keras CNN: conv blocks (conv-conv-pool-dropout) and a dense head."""
import math
from typing import Sequence

import tensorflow as tf

from models.cnn import features


def conv_block_count(height: int, width: int) -> int:
    """Pool while the feature map stays >= 2x2: 8x8 digits get 2 blocks, 32x32 get 3."""
    return max(1, min(3, int(math.log2(max(2, min(height, width)))) - 1))


def build_cnn(image_shape: Sequence[int], num_classes: int, learning_rate: float = 1e-3,
              dropout: float = 0.25, jit_compile: bool = False) -> tf.keras.Model:
    """Build and compile the classifier; call inside ``strategy.scope()``."""
    height, width, channels = (int(v) for v in image_shape)
    inputs = tf.keras.Input(shape=(height * width * channels,), name=features.IMAGE_XF)
    x = tf.keras.layers.Reshape((height, width, channels))(inputs)
    filters = 32
    for _ in range(conv_block_count(height, width)):
        x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = tf.keras.layers.MaxPooling2D()(x)
        x = tf.keras.layers.Dropout(dropout)(x)
        filters *= 2
    x = tf.keras.layers.Flatten()(x)
    x = tf.keras.layers.Dense(128, activation="relu")(x)
    x = tf.keras.layers.Dropout(2 * dropout)(x)
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    model = tf.keras.Model(inputs, outputs, name="cnn")
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model

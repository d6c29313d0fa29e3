"""Keras CNN: conv+pool blocks sized to the image, a small head, optional augmentation.

The input is the transform graph's output: pixels standardised per pixel with the train split's
mean and spread (models/cnn/preprocessing.py), flattened. Augmentation layers sit after
the reshape and act only when Keras trains (``training=True``); the export calls the model
with ``training=False`` (they default to True outside ``fit``), so serving is deterministic.
"""
import math
from collections.abc import Sequence

import tensorflow as tf

from models.cnn import features
from models.cnn.hparams import CnnHyperparameters
from models.cnn.shift_zoom import RandomShiftZoom


def conv_block_count(height: int, width: int, max_blocks: int = 3) -> int:
    """Pool while the feature map stays >= 2x2, at most ``max_blocks``: 8x8 gets 2 blocks, 32x32 3."""
    return max(1, min(max_blocks, int(math.log2(max(2, min(height, width)))) - 1))


def augmentation_layers(augment: Sequence[str], seed: int = 0, strength: float | None = None) -> list:
    """The training-only preprocessing layers for ``augment`` (see hparams.AUGMENTATIONS);
    ``strength`` (hparams.augment_strength, None: 0.1) is their shift/zoom factor. A translation
    followed by a zoom is one layer that resamples each image once (shift_zoom.py)."""
    layers = tf.keras.layers
    factor = 0.1 if strength is None else float(strength)
    make = {
        "translate": lambda: layers.RandomTranslation(factor, factor, fill_mode="nearest", seed=seed),
        "zoom": lambda: layers.RandomZoom(factor, fill_mode="nearest", seed=seed + 1),
        "contrast": lambda: layers.RandomContrast(2 * factor, seed=seed + 2),
        "flip": lambda: layers.RandomFlip("horizontal", seed=seed + 3),
    }
    made, names = [], list(augment)
    while names:
        if names[:2] == ["translate", "zoom"]:  # one resample for both (shift_zoom.py)
            made.append(RandomShiftZoom(factor, seed=seed + 4))
            names = names[2:]
        else:
            made.append(make[names.pop(0)]())
    return made


def build_cnn(image_shape: Sequence[int], num_classes: int, learning_rate: float = 1e-3,
              hparams: CnnHyperparameters = CnnHyperparameters(),  # noqa: B008 - frozen dataclass
              jit_compile: bool = False, steps_per_execution: int = 1) -> tf.keras.Model:
    """Build and compile the classifier; call inside ``strategy.scope()``. ``steps_per_execution``: as
    Keras' ``compile`` (the in-memory regime's ``regime.STEPS_PER_EXECUTION``)."""
    height, width, channels = (int(v) for v in image_shape)
    regularizer = tf.keras.regularizers.L2(hparams.l2) if hparams.l2 else None
    inputs = tf.keras.Input(shape=(height * width * channels,), name=features.IMAGE_XF)
    x = tf.keras.layers.Reshape((height, width, channels))(inputs)
    for layer in augmentation_layers(hparams.augmentations(height, width), strength=hparams.augment_strength):
        x = layer(x)
    filters = hparams.filters
    for _ in range(conv_block_count(height, width, hparams.max_blocks)):
        for _ in range(hparams.convs_per_block):
            x = tf.keras.layers.Conv2D(filters, 3, padding="same", activation="relu",
                                       kernel_regularizer=regularizer)(x)
        x = tf.keras.layers.MaxPooling2D()(x)
        filters *= 2
    x = tf.keras.layers.Flatten()(x)
    if hparams.dense_units:
        x = tf.keras.layers.Dropout(hparams.dropout)(x)
        x = tf.keras.layers.Dense(hparams.dense_units, activation="relu",
                                  kernel_regularizer=regularizer)(x)
    x = tf.keras.layers.Dropout(hparams.dropout)(x)
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", name="probabilities",
                                    kernel_regularizer=regularizer)(x)
    model = tf.keras.Model(inputs, outputs, name="cnn")
    compile_classifier(model, learning_rate, jit_compile, steps_per_execution)
    return model


def build_on_base_model(image_shape: Sequence[int], num_classes: int, base, learning_rate: float = 1e-3,
                        hparams: CnnHyperparameters = CnnHyperparameters(),  # noqa: B008 - frozen dataclass
                        jit_compile: bool = False, steps_per_execution: int = 1) -> tf.keras.Model:
    """A new softmax head on a pretrained feature extractor (``base``: base_model.BaseModelInfo),
    frozen; :func:`unfreeze_base` before fine-tuning. Images are resized to the module's size
    and given 3 channels (gray repeated, alpha dropped)."""
    from models.cnn import base_model

    height, width, channels = (int(v) for v in image_shape)
    inputs = tf.keras.Input(shape=(height * width * channels,), name=features.IMAGE_UNIT_XF)
    x = tf.keras.layers.Reshape((height, width, channels))(inputs)
    if channels == 1:
        x = tf.keras.layers.Concatenate()([x, x, x])
    elif channels != 3:
        x = tf.keras.layers.Lambda(lambda images: images[..., :3])(x)
    if (height, width) != (base.height, base.width):
        x = tf.keras.layers.Resizing(base.height, base.width)(x)
    for layer in augmentation_layers(hparams.augmentations(base.height, base.width),
                                     strength=hparams.augment_strength):
        x = layer(x)
    x = base_model.feature_extractor(base, trainable=False)(x)
    x = tf.keras.layers.Dropout(hparams.dropout)(x)
    outputs = tf.keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(x)
    model = tf.keras.Model(inputs, outputs, name="cnn_on_base_model")
    compile_classifier(model, learning_rate, jit_compile, steps_per_execution)
    return model


def unfreeze_base(model: tf.keras.Model, learning_rate: float, jit_compile: bool = False,
                  steps_per_execution: int = 1) -> tf.keras.Model:
    """Make the base model trainable and recompile at ``learning_rate`` (lower than the head's)."""
    model.get_layer("base_model").trainable = True
    compile_classifier(model, learning_rate, jit_compile, steps_per_execution)
    return model


def compile_classifier(model: tf.keras.Model, learning_rate: float, jit_compile: bool = False,
                       steps_per_execution: int = 1) -> None:
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")],
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )

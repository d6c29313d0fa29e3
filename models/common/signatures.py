"""Names and serving signatures shared by every model family.

TFMA and TF Serving both call ``serving_default`` with serialized ``tf.Example``s, and
TFMA calls ``transform_features`` to read transformed labels; building them in one place
keeps the two families' exports identical in shape.
"""
from collections.abc import Callable, Iterable

import tensorflow as tf
import tensorflow_transform as tft
from tf_keras.src.saving.legacy.saved_model.utils import keras_option_scope

TRANSFORMED_SUFFIX = "_xf"


def transformed_name(key: str) -> str:
    return key + TRANSFORMED_SUFFIX


def save_serving_model(model: tf.keras.Model, export_dir: str, signatures: dict) -> None:
    """Save ``model``'s weights and ``signatures``, without Keras's per-layer traces.

    ``tf.saved_model.save`` on a Keras model also traces every layer's call functions so that
    Keras can revive the layers (tf_keras ``saving/legacy/saved_model/base_serialization.py``,
    ``trackable_children``). Nothing here loads them back as Keras: TFMA, TF Serving, the CLI
    and warm start use the signatures or the variables checkpoint. The seq2seq export held
    hundreds of such functions, and every load (each Evaluator, ``predict``, ``generate``)
    rebuilt all of them. ``keras_option_scope(save_traces=False)`` is what Keras's own
    ``model.save(save_traces=False)`` sets (tf_keras ``saving/legacy/save.py``); the layers'
    variables and sub-objects are still saved (``Layer._trackable_children`` adds them either
    way), so the checkpoint that warm start reads keeps its object graph.
    """
    with keras_option_scope(save_traces=False, in_tf_saved_model_scope=True):
        tf.saved_model.save(model, export_dir, signatures=signatures)


def raw_serving_spec(tf_transform_output: tft.TFTransformOutput, drop: Iterable[str]) -> dict:
    """Raw feature spec a serving request must carry: everything but ``drop`` (labels)."""
    spec = dict(tf_transform_output.raw_feature_spec())
    for key in drop:
        spec.pop(key, None)
    return spec


def examples_signature(model: tf.keras.Model, raw_spec: dict,
                       outputs: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]):
    """``serving_default``: serialized tf.Examples -> the model's outputs.

    ``outputs`` maps transformed features to the output dict; ``model.tft_layer`` must be
    set (TFT prunes the transform to the features it is fed, so labels may be absent).
    """

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def serve_examples(serialized):
        parsed = tf.io.parse_example(serialized, raw_spec)
        return outputs(model.tft_layer(parsed))

    return serve_examples


def transform_features_signature(model: tf.keras.Model, tf_transform_output: tft.TFTransformOutput):
    """``transform_features``: serialized tf.Examples -> all transformed features (for TFMA labels)."""
    raw_spec = tf_transform_output.raw_feature_spec()

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
    def transform_features(serialized):
        return model.tft_layer(tf.io.parse_example(serialized, raw_spec))

    return transform_features

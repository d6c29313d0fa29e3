"""Export the CNN as a TF Serving SavedModel with its signatures.

- ``serving_default``: serialized tf.Examples -> probabilities, class_ids, classes
  (TFMA evaluates through it; TF Serving clients can send Examples).
- ``predict_image``: float pixels [batch, H, W, C] in 0-255 -> the same outputs, for
  clients that have images, not Examples.
- ``score_examples``: serialized tf.Examples -> probabilities and ``classes`` as [batch, 1], for TFX's
  BulkInferrer (``run --score``): tfx_bsl's RunInference (1.16, ``_PredictModelHandler._post_process``)
  splits each output per example and reads ``.dtype`` of the piece, which a per-example string
  scalar (``serving_default``'s ``classes``) does not have, so it fails on ``serving_default``.
- ``transform_features``: for TFMA to read the transformed (id) label.
TF Serving warm-up requests for the first two go into ``assets.extra`` (models/common/warmup.py).
The transform graph is embedded (``model.tft_layer``), so serving needs no Python.
"""
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_transform as tft

from models.cnn import features
from models.common import signatures, warmup

PREDICT_IMAGE_SIGNATURE = "predict_image"
SCORE_SIGNATURE = "score_examples"


def _output_fn(model: tf.keras.Model, class_names: Sequence[str]):
    names = tf.constant(list(class_names), dtype=tf.string)

    def outputs(transformed: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        # A CNN from scratch reads the standardised pixels, one on a base model [0, 1] pixels.
        # training=False explicitly: Keras' random augmentation layers default to training=True
        # when called outside fit(), so without it every served prediction would be augmented.
        probabilities = model({name: transformed[name] for name in model.input_names}, training=False)
        class_ids = tf.argmax(probabilities, axis=-1)
        return {
            "probabilities": probabilities,
            "class_ids": class_ids,
            "classes": tf.gather(names, class_ids),
        }

    return outputs


def export_serving_model(model: tf.keras.Model, tf_transform_output: tft.TFTransformOutput,
                         export_dir: str, image_shape: Sequence[int]) -> None:
    height, width, channels = (int(v) for v in image_shape)
    class_names = [v.decode() for v in tf_transform_output.vocabulary_by_name(features.LABEL_VOCABULARY)]
    model.tft_layer = tf_transform_output.transform_features_layer()
    outputs = _output_fn(model, class_names)
    raw_spec = signatures.raw_serving_spec(tf_transform_output, drop=features.LABEL_KEYS)
    # Only the image is needed to predict; slicing/id features stay optional for clients.
    raw_spec = {features.IMAGE: raw_spec[features.IMAGE]}

    @tf.function(input_signature=[
        tf.TensorSpec([None, height, width, channels], tf.float32, name="images")])
    def predict_image(images):
        pixels = tf.cast(tf.round(tf.clip_by_value(images, 0.0, 255.0)), tf.int64)
        flat = tf.reshape(pixels, [-1, height * width * channels])
        return outputs(model.tft_layer({features.IMAGE: flat}))

    def score_outputs(transformed: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        served = outputs(transformed)
        return {"probabilities": served["probabilities"], "classes": tf.expand_dims(served["classes"], -1)}

    signatures.save_serving_model(model, export_dir, {
        "serving_default": signatures.examples_signature(model, raw_spec, outputs),
        SCORE_SIGNATURE: signatures.examples_signature(model, raw_spec, score_outputs),
        PREDICT_IMAGE_SIGNATURE: predict_image,
        "transform_features": signatures.transform_features_signature(model, tf_transform_output),
    })
    warmup.write_warmup_requests(export_dir, [
        ("serving_default", {"examples": np.array([warmup.zero_example(raw_spec)], dtype=object)}),
        (PREDICT_IMAGE_SIGNATURE, {"images": np.zeros([1, height, width, channels], np.float32)}),
    ])

"""The CNN's TFLite conversion: its ``predict_image`` signature (pixels in, class out).

``predict_image`` holds the whole served computation (pixel standardisation from the
transform graph, the CNN, the kernel head when kept, the class names), so the TFLite
model needs nothing beside it. Raw examples (the data contract, data/features.py) become
its float pixel input and the class ids the labels.
"""
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from models.cnn import features
from models.cnn.export import PREDICT_IMAGE_SIGNATURE
from models.common.tflite import TfliteSpec


def images_and_labels(serialized: Sequence[bytes], image_shape: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Raw serialized tf.Examples -> (float32 pixels [N, H, W, C] in 0-255, label ids [N])."""
    size = int(np.prod(image_shape))
    parsed = tf.io.parse_example(tf.constant(list(serialized), tf.string), {
        features.IMAGE: tf.io.FixedLenFeature([size], tf.int64),
        features.LABEL_ID: tf.io.FixedLenFeature([], tf.int64)})
    images = parsed[features.IMAGE].numpy().astype(np.float32).reshape(-1, *image_shape)
    return images, parsed[features.LABEL_ID].numpy()


TFLITE = TfliteSpec(signature=PREDICT_IMAGE_SIGNATURE, input_name="images", probabilities="probabilities",
                    examples=images_and_labels)

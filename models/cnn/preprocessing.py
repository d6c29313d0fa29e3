"""TFT preprocessing for images: the same graph runs in Transform, training and serving."""
from typing import Any, Dict, Optional

import tensorflow as tf
import tensorflow_transform as tft

from models.cnn import features


def preprocessing_fn(inputs: Dict[str, tf.Tensor], custom_config: Optional[Dict[str, Any]] = None):
    """Scale pixels to [0, 1] and map class names to ids.

    The known class names (``custom_config["class_names"]``, sorted) are reserved at
    the start of the vocabulary, so class id i is the i-th class name, exactly as the
    data's ``label_id`` and the model's output index.
    """
    class_names = list((custom_config or {}).get("class_names") or [])
    image = tf.cast(inputs[features.IMAGE], tf.float32) / 255.0
    label_id = tft.compute_and_apply_vocabulary(
        inputs[features.LABEL],
        vocab_filename=features.LABEL_VOCABULARY,
        reserved_tokens=class_names or None,
        num_oov_buckets=0,
        default_value=-1,
    )
    return {features.IMAGE_XF: image, features.LABEL_XF: label_id}

"""TFT preprocessing for images: the same graph runs in Transform, training and serving.

Pixels are standardised per pixel with the mean and spread of the TRAIN split, computed by
TFT analyzers (Transform analyses the train split only) and baked into the transform graph
as constants, so serving normalises exactly as training did. Measured on real image sets,
this beat plain [0, 1] scaling (benchmarks/README.md, "Your own images"): icons and glyphs
have a mostly constant background, and per-pixel statistics put the informative pixels on
one scale.
"""
from typing import Any

import tensorflow as tf
import tensorflow_transform as tft

from data.manifest import facts_in
from models.cnn import features

#: Smallest spread a pixel is divided by (on the [0, 1] scale): a pixel that is constant in
#: train (a background corner) must not blow up when a serving image differs there.
STD_FLOOR = 0.05
#: Transform setting (custom_config key): also output the pixels scaled to [0, 1], which only a
#: pretrained base model reads (``--base-model``). Off, the graph the Trainer and serving apply
#: computes one image feature instead of two (a second copy of every pixel as floats).
UNIT_IMAGE = "unit_image"


def preprocessing_fn(inputs: dict[str, tf.Tensor], custom_config: dict[str, Any] | None = None):
    """Standardise pixels per pixel and map class names to ids; with ``custom_config[UNIT_IMAGE]``
    also pass pixels scaled to [0, 1], the input convention of pretrained TF Hub image modules
    (``--base-model``).

    The known class names (the data's facts in ``custom_config``, sorted) are reserved at
    the start of the vocabulary, so class id i is the i-th class name, exactly as the
    data's ``label_id`` and the model's output index.
    """
    class_names = list(facts_in(custom_config).get("classes") or [])
    image = tf.cast(inputs[features.IMAGE], tf.float32) / 255.0
    mean = tft.mean(image, reduce_instance_dims=False)
    std = tf.maximum(tf.sqrt(tft.var(image, reduce_instance_dims=False)), STD_FLOOR)
    label_id = tft.compute_and_apply_vocabulary(
        inputs[features.LABEL],
        vocab_filename=features.LABEL_VOCABULARY,
        reserved_tokens=class_names or None,
        num_oov_buckets=0,
        default_value=-1,
    )
    outputs = {features.IMAGE_XF: (image - mean) / std, features.LABEL_XF: label_id}
    if (custom_config or {}).get(UNIT_IMAGE):
        outputs[features.IMAGE_UNIT_XF] = image
    return outputs

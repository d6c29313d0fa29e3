"""Raw examples read through the transform graph, for a family whose Transform only analyses.

Why: for images, Transform's second pass, writing every transformed example, was about half of its
time (docs/history/benchmarks-log.md, "Transform analyses, the Trainer transforms"). The Trainer
and the Tuner read each split anyway; applying the graph to each parsed block as they load it costs
a fraction of writing and re-reading it, and the model sees the same tensors: the graph is the one
Transform saved, the one serving applies.
"""
from collections.abc import Iterable

import tensorflow as tf
import tensorflow_transform as tft

from models.common.inputs import Transform


def reader(transform_output: tft.TFTransformOutput, raw_keys: Iterable[str],
           keys: Iterable[str]) -> tuple[dict[str, tf.io.FixedLenFeature], Transform]:
    """The raw feature spec to parse (``raw_keys``, the features ``preprocessing_fn`` reads) and the
    function mapping parsed raw features to the transformed ``keys``: the two arguments
    ``inputs.make_dataset`` and ``inputs.load_split`` take for raw examples."""
    raw_spec = transform_output.raw_feature_spec()
    spec = {key: raw_spec[key] for key in raw_keys}
    layer = transform_output.transform_features_layer()
    wanted = tuple(keys)

    def transform(raw: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
        transformed = layer(raw)
        return {key: transformed[key] for key in wanted}

    return spec, transform

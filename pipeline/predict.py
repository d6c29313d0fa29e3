"""Classify image files with a pushed model, through its ``predict_image`` signature.

Uses exactly what TF Serving would load: the SavedModel in a version directory.
"""
import os
from typing import Iterator, Sequence

import numpy as np
import tensorflow as tf

from components.serving_dir import latest_version_dir
from data.images import load_image_array

PREDICT_IMAGE_SIGNATURE = "predict_image"


def resolve_version_dir(model_dir: str) -> str:
    """A version dir as is, or the newest version under a model base dir (as TF Serving picks)."""
    if tf.io.gfile.exists(os.path.join(model_dir, "saved_model.pb")):
        return model_dir
    if not tf.io.gfile.isdir(model_dir):
        raise FileNotFoundError(f"Model directory {model_dir} does not exist. Pass the serving dir of a "
                                "pushed model, e.g. output/serving/cnn (see the run summary's 'Pushed:' line).")
    version_dir = latest_version_dir(model_dir)
    if version_dir is None:
        raise FileNotFoundError(f"No model version (a numeric folder with saved_model.pb) in {model_dir}. "
                                "Run the pipeline until a model is blessed and pushed.")
    return version_dir


def predict_files(model_dir: str, image_paths: Sequence[str]) -> Iterator[str]:
    version_dir = resolve_version_dir(model_dir)
    model = tf.saved_model.load(version_dir)
    if PREDICT_IMAGE_SIGNATURE not in model.signatures:
        raise FileNotFoundError(f"{version_dir} has no '{PREDICT_IMAGE_SIGNATURE}' signature; "
                                f"it has {sorted(model.signatures)}. Is it an image model?")
    signature = model.signatures[PREDICT_IMAGE_SIGNATURE]
    _, height, width, channels = signature.structured_input_signature[1]["images"].shape
    images = [load_image_array(path, (height, width), channels) for path in image_paths]
    outputs = signature(images=tf.constant(np.stack(images).astype("float32")))
    for path, name, probabilities in zip(image_paths, outputs["classes"].numpy(),
                                         outputs["probabilities"].numpy()):
        yield f"{path}\t{name.decode()}\t{probabilities.max():.3f}"

"""Use a pushed model as TF Serving would: images through ``predict_image``, text through ``generate``.

Loads exactly what TF Serving loads: the SavedModel in a version directory.
"""
import os
from collections.abc import Iterator, Sequence

from stackenv.errors import MissingInput, PathError

import numpy as np
import tensorflow as tf

from artifacts.serving_dir import latest_version_dir
from data.images import load_image_array
from data.images.pixels import check_image_file

PREDICT_IMAGE_SIGNATURE = "predict_image"
GENERATE_SIGNATURE = "generate"


def resolve_version_dir(model_dir: str) -> str:
    """A version dir as is, or the newest version under a model base dir (as TF Serving picks)."""
    if tf.io.gfile.exists(os.path.join(model_dir, "saved_model.pb")):
        return model_dir
    if tf.io.gfile.exists(model_dir) and not tf.io.gfile.isdir(model_dir):
        raise PathError(f"--model-dir {model_dir} is a file, not a directory. Pass the serving dir of a pushed "
                        "model (e.g. output/serving/cnn) or one of its version folders.", model_dir)
    if not tf.io.gfile.isdir(model_dir):
        raise MissingInput(f"Model directory {model_dir} does not exist. Pass the serving dir of a "
                                "pushed model, e.g. output/serving/cnn (see the run summary's 'Pushed:' line).")
    version_dir = latest_version_dir(model_dir)
    if version_dir is None:
        raise MissingInput(f"No model version (a numeric folder with saved_model.pb) in {model_dir}. "
                                "Run the pipeline until a model is blessed and pushed.")
    return version_dir


def _load(version_dir: str):
    """The SavedModel, or one paragraph naming the folder when it is damaged (the served one is too)."""
    from artifacts.model_files import READ_ERRORS, damaged

    try:
        return tf.saved_model.load(version_dir)
    except READ_ERRORS as error:  # IndexError: a truncated variables file
        raise damaged(version_dir, error) from error


def _signature(model_dir: str, name: str, kind: str):
    version_dir = resolve_version_dir(model_dir)
    model = _load(version_dir)
    if name not in model.signatures:
        raise MissingInput(f"{version_dir} has no '{name}' signature; it has {sorted(model.signatures)}. "
                                f"Is it {kind}?")
    return model.signatures[name]


def predict_files(model_dir: str, image_paths: Sequence[str]) -> Iterator[str]:
    for path in image_paths:  # before loading the model: a typo should not cost a model load
        if not os.path.isfile(path):  # a fifo or device is never opened: a read could block
            what = ("is a directory" if os.path.isdir(path) else "does not exist" if not os.path.exists(path)
                    else "is not a regular file (a fifo, socket or device)")
            raise MissingInput(f"Image file {path} {what}. Pass the path of an image file to classify (PNG, "
                               "JPEG, GIF, WebP, BMP or TIFF).")
        check_image_file(path)
    signature = _signature(model_dir, PREDICT_IMAGE_SIGNATURE, "an image model (--model cnn)")
    _, height, width, channels = signature.structured_input_signature[1]["images"].shape
    images = [load_image_array(path, (height, width), channels) for path in image_paths]
    outputs = signature(images=tf.constant(np.stack(images).astype("float32")))
    for path, name, probabilities in zip(image_paths, outputs["classes"].numpy(),
                                         outputs["probabilities"].numpy()):
        yield f"{path}\t{name.decode()}\t{probabilities.max():.3f}"


def generate_text(model_dir: str, prompts: Sequence[str], max_tokens: int = 20, top_k: int = 1,
                  temperature: float = 1.0, stop_at: str = "") -> list[str]:
    """Continuations of ``prompts``: greedy for top_k <= 1, else top-k sampling at ``temperature``.

    Each goes on for ``max_tokens`` tokens, or until it emits one of the space-separated
    ``stop_at`` tokens (e.g. ``". ? !"``: one sentence).
    """
    signature = _signature(model_dir, GENERATE_SIGNATURE, "a text model (--model seq2seq)")
    outputs = signature(prompts=tf.constant(list(prompts)), max_new_tokens=tf.constant(max_tokens, tf.int32),
                        top_k=tf.constant(top_k, tf.int32), temperature=tf.constant(temperature, tf.float32),
                        stop_at=tf.constant(stop_at))
    return [text.decode() for text in outputs["continuations"].numpy()]

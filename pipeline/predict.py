"""Use a pushed model as TF Serving would: images through ``predict_image``, text through ``generate``.

Loads exactly what TF Serving loads: the SavedModel in a version directory; with
``--tflite``, the TFLite model the Pusher wrote beside it (``tflite/model_<quantization>.tflite``),
run by TensorFlow's own interpreter (``tf.lite.Interpreter``), as a device would run it.
"""
import os
from collections.abc import Iterator, Sequence

from stackenv.errors import MissingInput, PathError, ProjectError

import numpy as np
import tensorflow as tf

from artifacts.serving_dir import latest_version_dir, read_push_info, tflite_file
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


def predict_files(model_dir: str, image_paths: Sequence[str], tflite: str | None = None) -> Iterator[str]:
    """``path<TAB>class<TAB>confidence`` per image; ``tflite``: a quantization, to run that TFLite model."""
    for path in image_paths:  # before loading the model: a typo should not cost a model load
        if not os.path.isfile(path):  # a fifo or device is never opened: a read could block
            what = ("is a directory" if os.path.isdir(path) else "does not exist" if not os.path.exists(path)
                    else "is not a regular file (a fifo, socket or device)")
            raise MissingInput(f"Image file {path} {what}. Pass the path of an image file to classify (PNG, "
                               "JPEG, GIF, WebP, BMP or TIFF).")
        check_image_file(path)
    if tflite:
        outputs = _tflite_outputs(resolve_version_dir(model_dir), tflite, image_paths)
    else:
        signature = _signature(model_dir, PREDICT_IMAGE_SIGNATURE, "an image model (--model cnn)")
        _, height, width, channels = signature.structured_input_signature[1]["images"].shape
        images = [load_image_array(path, (height, width), channels) for path in image_paths]
        outputs = {name: value.numpy() for name, value in
                   signature(images=tf.constant(np.stack(images).astype("float32"))).items()}
    for path, name, probabilities in zip(image_paths, outputs["classes"], outputs["probabilities"]):
        yield f"{path}\t{name.decode()}\t{probabilities.max():.3f}"


def tflite_path(version_dir: str, quantization: str) -> str:
    """The version's TFLite model, or one paragraph saying why it has none (from push_info.json)."""
    path = os.path.join(version_dir, tflite_file(quantization))
    if tf.io.gfile.exists(path):
        return path
    record = read_push_info(version_dir).get("tflite")
    if record is None:
        why = "it was pushed before the Pusher wrote TFLite models, or not by this pipeline's Pusher"
    else:
        why = (record.get(quantization) or {}).get("why") or record.get("why") or "no reason recorded"
    raise MissingInput(f"No {quantization} TFLite model in {version_dir} (expected {tflite_file(quantization)}): "
                       f"{why}. Run predict without --tflite to use the SavedModel, try the other "
                       "--quantization, or push a new version of an image model (the Pusher converts each one "
                       "and writes it when it agrees with the SavedModel).")


def _tflite_outputs(version_dir: str, quantization: str, image_paths: Sequence[str]) -> dict[str, np.ndarray]:
    from models.common import tflite

    path = tflite_path(version_dir, quantization)
    try:
        interpreter = tflite.interpreter(path)
        height, width, channels = tflite.input_shape(path, PREDICT_IMAGE_SIGNATURE, "images")
    except (ValueError, RuntimeError, KeyError) as error:
        raise ProjectError(f"Cannot run the TFLite model {path}: {error}. The file is damaged or not this "
                           "project's image model; run predict without --tflite to use the SavedModel.") from error
    images = np.stack([load_image_array(p, (height, width), channels) for p in image_paths]).astype("float32")
    return tflite.run(interpreter, PREDICT_IMAGE_SIGNATURE, {"images": images})


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

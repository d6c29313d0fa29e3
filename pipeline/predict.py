"""Use a pushed model as TF Serving would: images through ``predict_image``, text through ``generate``.

Loads exactly what TF Serving loads: the SavedModel in a version directory; with
``--tflite``, the TFLite model the Pusher wrote beside it (``tflite/model_<quantization>.tflite``),
run by TensorFlow's own interpreter (``tf.lite.Interpreter``), as a device would run it.
"""
import os
from collections.abc import Iterator, Sequence

from stackenv import user_files
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
        raise MissingInput(f"Model directory {model_dir} does not exist. " + (
            why_nothing_served(model_dir) or "Pass the serving dir of a pushed model, e.g. output/serving/cnn "
            "(see the run summary's 'Pushed:' line)."))
    version_dir = latest_version_dir(model_dir)
    if version_dir is None:
        raise MissingInput(f"No model version (a numeric folder with saved_model.pb) in {model_dir}. "
                           + (why_nothing_served(model_dir) or "Run the pipeline until a model is blessed and pushed."))
    return version_dir


def why_nothing_served(model_dir: str) -> str | None:
    """Why the latest run beside ``model_dir`` (``<output>/serving/<name>``) pushed nothing, from its MLMD store.

    None when there is no such store or run (a serving dir elsewhere, or never run).
    """
    output = os.path.dirname(os.path.dirname(os.path.abspath(model_dir)))
    metadata = os.path.join(output, "metadata.sqlite")
    if not os.path.isfile(metadata):
        return None
    from artifacts.tfma_results import validation_failures
    from pipeline import graph
    from pipeline.results import gate_summary, mlmd

    try:
        store = mlmd.open_store(mlmd.sqlite_config(metadata))
        pipelines = [context.name for context in store.get_contexts_by_type("pipeline")]
        # One pipeline per output dir is the usual case; else the default name of this serving dir's.
        own = f"{os.path.basename(os.path.normpath(model_dir))}-pipeline"
        pipeline_name = pipelines[0] if len(pipelines) == 1 else own
        run = mlmd.latest_run(store, pipeline_name)
    except Exception:  # noqa: BLE001 - an unreadable store only loses the explanation
        return None
    evaluator = run.get(graph.EVALUATOR)
    if evaluator is None:
        return (f"The latest run of {pipeline_name} ({metadata}) stopped before its Evaluator ran, so no model "
                "was judged; `python -m pipeline report` shows where it stopped. Fix that and run again.")
    blessing = (evaluator.outputs.get("blessing") or [None])[0]
    if blessing is None or mlmd.custom_property(blessing, "blessed"):
        return None
    evaluation = (evaluator.outputs.get("evaluation") or [None])[0]
    reasons = validation_failures(evaluation.uri) if evaluation is not None else []
    trainer = run.get(graph.TRAINER)
    model = (trainer.outputs.get("model") or [None])[0] if trainer else None
    remedy = gate_summary.remedy_lines(model.uri if model is not None else None)
    because = "; ".join(reasons) or "it did not pass the gate"
    help_ = remedy[0].strip(" -") if remedy else "see the run summary for the gate's numbers"
    return (f"The latest run of {pipeline_name} trained a model but did not bless it ({because}), so nothing was "
            f"pushed; {help_}.")


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
        cap = user_files.TFLITE_MAX_BYTES
        data = path if "://" in path else user_files.read_user_bytes(path, flag=None, what="a TFLite model",
                                                                     max_bytes=cap)
        interpreter = tflite.interpreter(data)
        height, width, channels = tflite.input_shape(interpreter, PREDICT_IMAGE_SIGNATURE, "images")
    except user_files.UserFileError as error:
        raise ProjectError(f"{error.paragraph} Run predict without --tflite to use the SavedModel.") from None
    except (ValueError, RuntimeError, KeyError) as error:
        raise ProjectError(f"Cannot run the TFLite model {path}: {error}. The file is damaged or not this "
                           "project's image model; run predict without --tflite to use the SavedModel.") from error
    images = np.stack([load_image_array(p, (height, width), channels) for p in image_paths]).astype("float32")
    return tflite.run(interpreter, PREDICT_IMAGE_SIGNATURE, {"images": images})


def generate_text(model_dir: str, prompts: Sequence[str], max_tokens: int = 20, top_k: int = 1,
                  temperature: float = 1.0, stop_at: str = "", **rules) -> list[str]:
    """Continuations of ``prompts``: greedy for top_k <= 1, else top-k (and top-p) sampling at ``temperature``.

    Each goes on for ``max_tokens`` tokens, or until it emits one of the space-separated
    ``stop_at`` tokens (e.g. ``". ? !"``: one sentence). ``rules``: ``top_p``,
    ``repetition_penalty``, ``no_repeat_ngram``, ``seed`` (models/seq2seq/export.py
    ``GENERATE_DEFAULTS``); a model exported before one existed ignores it.
    """
    return [text for text, _ in generate_scored(model_dir, prompts, max_tokens, top_k, temperature, stop_at,
                                                with_scores=False, **rules)]


def generate_scored(model_dir: str, prompts: Sequence[str], max_tokens: int = 20, top_k: int = 1,
                    temperature: float = 1.0, stop_at: str = "", with_scores: bool = True,
                    **rules) -> list[tuple[str, list[float] | None]]:
    """:func:`generate_text`'s continuations, each with the probability the served model gave each of its
    tokens (before the repetition rules and the draw; None without ``with_scores``). A model exported before
    the signature gave them is refused with what to do."""
    from models.seq2seq.export import generate_request

    signature = _signature(model_dir, GENERATE_SIGNATURE, "a text model (--model seq2seq)")
    if with_scores and "token_probabilities" not in signature.structured_outputs:
        raise ProjectError(f"The model in {model_dir} gives no per-token probabilities: it was exported before its "
                           "generate signature did. Run the pipeline again to push a model that does, or leave out "
                           "--show-scores.")
    outputs = signature(**generate_request(prompts, signature.structured_input_signature[1], max_new_tokens=max_tokens,
                                           top_k=top_k, temperature=temperature, stop_at=stop_at, **rules))
    texts = [text.decode() for text in outputs["continuations"].numpy()]
    if not with_scores:
        return [(text, None) for text in texts]
    counts = outputs["token_counts"].numpy()
    given = outputs["token_probabilities"].numpy()
    return [(text, [float(p) for p in row[:count]]) for text, row, count in zip(texts, given, counts)]

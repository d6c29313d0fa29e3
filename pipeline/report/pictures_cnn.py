"""Pictures of an image classifier's evaluation: the confusion matrix and the mistakes.

The mistakes come from running the candidate's ``serving_default`` on eval examples, so
they show what the evaluated model does, pushed or not.
"""
import math

import numpy as np
import pandas as pd
import tensorflow as tf
from matplotlib.figure import Figure

from pipeline.report.evaluations import Evaluation
from pipeline.report.figures import plot_confusion_matrix, short
from pipeline.report.inputs import candidate_model, dataset_manifest, eval_records
from pipeline.report.tables import confusion_matrix_frame


def _image_shape(evaluation: Evaluation, model) -> tuple[int, int, int]:
    manifest = dataset_manifest(evaluation)
    if manifest is not None and manifest.image_shape:
        height, width, channels = manifest.image_shape  # [H, W, C]
        return int(height), int(width), int(channels)
    _, height, width, channels = model.signatures["predict_image"].structured_input_signature[1]["images"].shape
    return int(height), int(width), int(channels)


def misclassified_examples(evaluation: Evaluation, sample_size: int = 300) -> pd.DataFrame:
    """Run the candidate's ``serving_default`` on the first ``sample_size`` eval examples.

    Returns the wrong ones: ``example_id, actual, predicted, confidence, image`` (HxWxC
    uint8). ``df.attrs["sampled"]`` is how many examples were classified. The candidate
    is the Trainer's model, i.e. the one the metrics describe, pushed or not.
    """
    from data import features

    model = candidate_model(evaluation)
    serialized = eval_records(evaluation, sample_size)
    outputs = model.signatures["serving_default"](examples=tf.constant(serialized))
    predicted = [c.decode() for c in outputs["classes"].numpy()]
    confidence = outputs["probabilities"].numpy().max(axis=-1)
    shape = _image_shape(evaluation, model)
    rows = []
    for record, guess, score in zip(serialized, predicted, confidence):
        feature = tf.train.Example.FromString(record).features.feature
        actual = feature[features.LABEL].bytes_list.value[0].decode()
        if actual != guess:
            pixels = np.asarray(feature[features.IMAGE].int64_list.value, dtype=np.uint8).reshape(shape)
            rows.append({"example_id": feature[features.EXAMPLE_ID].bytes_list.value[0].decode(),
                         "actual": actual, "predicted": guess, "confidence": float(score), "image": pixels})
    frame = pd.DataFrame(rows, columns=["example_id", "actual", "predicted", "confidence", "image"])
    frame.attrs["sampled"] = len(serialized)
    return frame


def plot_misclassified(examples: pd.DataFrame, max_images: int = 24, columns: int = 8) -> Figure:
    """Grid of misclassified images titled ``actual -> predicted (confidence)``."""
    shown = examples.head(max_images)
    rows = max(1, math.ceil(len(shown) / columns))
    figure = Figure(figsize=(1.4 * columns, 1.6 * rows + 0.6))
    for index, (_, example) in enumerate(shown.iterrows()):
        axes = figure.add_subplot(rows, columns, index + 1)
        image = example["image"]
        axes.imshow(image[..., 0] if image.shape[-1] == 1 else image, cmap="gray" if image.shape[-1] == 1 else None,
                    vmin=0, vmax=255)
        axes.set_title(f"{short(example['actual'], 8)} → {short(example['predicted'], 8)}\n"
                       f"({example['confidence']:.2f})", fontsize=8)
        axes.axis("off")
    sampled = examples.attrs.get("sampled", "?")
    if shown.empty:
        figure.text(0.5, 0.5, "no misclassified example", ha="center", va="center")
    figure.suptitle(f"Misclassified: {len(examples)} of {sampled} eval examples "
                    f"(showing {len(shown)}; actual → predicted)", fontsize=10)
    figure.tight_layout()
    return figure


def cnn_pictures(evaluation: Evaluation) -> dict[str, Figure]:
    """Image classifier: where classes are confused, and what the mistakes look like."""
    return {
        "Confusion matrix": plot_confusion_matrix(confusion_matrix_frame(evaluation)),
        "Misclassified eval images": plot_misclassified(misclassified_examples(evaluation)),
    }

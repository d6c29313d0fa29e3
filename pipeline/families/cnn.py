"""The ``cnn`` family: a Keras CNN image classifier (models/cnn/), gated on accuracy.

Functions import their code when called, so registering the family stays cheap (see
``pipeline/families/registry.py``).
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pipeline.families.registry import (
    BatchMemory,
    Memory,
    ModelCard,
    ModelFamily,
    ReportParts,
    RunConfig,
    Scoring,
    TrainingDefaults,
    Tuning,
    option,
    register,
)
from pipeline.settings import check_values

if TYPE_CHECKING:
    from stackenv.tfma import tfma

    from tensorflow_metadata.proto.v0 import schema_pb2

    from data.tfrecords import DatasetManifest


MIN_IMAGE_SIZE = 2
MAX_IMAGE_SIZE = 4096  # data.images.MAX_IMAGE_SIZE; not imported, registering a family stays cheap


@dataclasses.dataclass(frozen=True)
class ImageSettings:
    """Shape the images are converted to; None keeps the source's native shape (data/images.py)."""

    image_size: int | None = option("--image-size", None, low=MIN_IMAGE_SIZE, high=MAX_IMAGE_SIZE,
                                    help="resize images to N x N pixels",
                                    default_text=lambda: "native; folders: their own side up to 32")
    channels: int | None = option("--channels", None, choices=(1, 3), help="1 = grayscale, 3 = RGB",
                                  default_text=lambda: "native; folders: 1 when every image is grayscale")

    def __post_init__(self) -> None:
        # The CNN pools at least once (models/cnn/model.py), so a 1x1 image cannot train;
        # refusing it here costs nothing, the Trainer would fail only after Transform.
        check_values(self)


def prepare_images(config: RunConfig) -> DatasetManifest:
    from data.images import prepare_image_dataset

    settings = config.family_settings
    dataset = prepare_image_dataset(config.data, config.data_cache_dir, image_size=settings.image_size,
                                    channels=settings.channels, follow_links=config.follow_links)
    _check_base_model(config)
    return dataset


def _check_base_model(config: RunConfig) -> None:
    """A local --base-model is checked before TFX starts; a remote handle is resolved by the Trainer."""
    if not config.base_model:
        return
    from data.errors import DataError
    from models.cnn.base_model import BaseModelError, describe, is_remote

    try:
        if not is_remote(config.base_model):
            describe(config.base_model)
    except BaseModelError as error:
        raise DataError(str(error)) from error


def image_example_gen(config: RunConfig):
    from components.image_example_gen import image_example_gen

    _check_base_model(config)  # the graph is built before anything runs
    settings = config.family_settings
    return image_example_gen(config.data, image_size=settings.image_size, channels=settings.channels,
                             train_buckets=config.train_buckets, eval_buckets=config.eval_buckets,
                             split_feature="example_id", span_pattern=config.span_pattern, spans=config.spans,
                             follow_links=config.follow_links)


def _eval_config(config: RunConfig, dataset: DatasetManifest) -> tfma.EvalConfig:
    from models.cnn.evaluation import eval_config

    return eval_config(len(dataset.classes), config.min_accuracy, config.max_regression)


def curate_image_schema(schema: schema_pb2.Schema) -> None:
    """The data contract: pixels are 0-255, classes are the known labels, brightness its buckets."""
    from data import features
    from pipeline.families.schema_curation import keep_string_domains

    keep_string_domains(schema, [features.LABEL, features.BRIGHTNESS])
    for feature in schema.feature:
        if feature.name == features.IMAGE:
            feature.int_domain.min, feature.int_domain.max = 0, 255


#: Growth of the Trainer's peak RSS per example over the formula's bytes: the largest factor
#: ``benchmarks/memory_factors.py`` measured, rounded up.
MEMORY_FACTOR = 5.0
#: --image-size of image folders when left to the data (data/images/folder.py); the estimate's size then.
FOLDER_IMAGE_SIZE = 32


def bytes_per_example(image_size: int, channels: int, filters: int = 16, convs_per_block: int = 1,
                      factor: float = MEMORY_FACTOR) -> float:
    """float32 pixels and the first conv block's feature maps (later blocks are a quarter the area each)."""
    return factor * 4 * image_size * image_size * (channels + filters * convs_per_block)


def batch_memory(config: RunConfig) -> BatchMemory:
    """With the image size left to the data, the folders' default: a lower bound for larger native images."""
    size, channels = config.family_settings.image_size or FOLDER_IMAGE_SIZE, config.family_settings.channels or 3
    return BatchMemory(bytes_per_example(size, channels), f"{size}x{size}x{channels} images", "--image-size")


def _transform_config(config: RunConfig, dataset: DatasetManifest) -> dict[str, bool]:
    """Pixels scaled to [0, 1] as well only for a pretrained base model, their only reader."""
    from models.cnn.preprocessing import UNIT_IMAGE

    return {UNIT_IMAGE: True} if config.base_model else {}


FAMILY = register(ModelFamily(
    name="cnn",
    description="image classifier",
    data_help=("a folder with one sub-folder of PNG/JPEG images per class, a CIFAR-10 'python version' "
               "folder, or TFRecords in this project's feature spec (default: scikit-learn's bundled 8x8 "
               "digits)"),
    # The step budget follows the data (models/common/regime.py schedule, models/cnn/trainer.py): --epochs bounds it.
    defaults=TrainingDefaults(epochs=15, batch_size=64, learning_rate=1e-3, min_accuracy=0.0,
                              min_accuracy_note="gated on its reference predictors",
                              epochs_note=("while the train split fits in 1 GiB, transformed or as one byte a "
                                           "pixel: a step budget of min(these passes, 8 x sqrt(examples it fits on)) "
                                           "steps but at least 1000, "
                                           "stopped early on held-out train; a larger split: the same budget on all "
                                           "its examples, not stopped early, streamed")),
    # The name of the accuracy in models/cnn/evaluation.py (ArgmaxAccuracy, named after the Keras metric).
    gate_metric="sparse_categorical_accuracy",
    gate_metric_label="Accuracy",
    preprocessing_fn="models.cnn.preprocessing.preprocessing_fn",
    transform_config=_transform_config,
    run_fn="models.cnn.trainer.run_fn",
    prepare_data=prepare_images,
    example_gen=image_example_gen,
    eval_config=_eval_config,
    # A stable id, so an image stays in its split when other features change.
    split_feature="example_id",
    curate_schema=curate_image_schema,
    slicing_features=("label", "brightness"),
    report=ReportParts(pictures="pipeline.report.pictures_cnn.cnn_pictures"),
    settings_type=ImageSettings,
    class_vocabulary="label",
    reads_raw_examples=True,  # Transform need not write the images again: models/common/raw_examples.py
    tuning=Tuning(tuner_fn="models.cnn.tuning.tuner_fn", search_space="models.cnn.hparams.SEARCH_SPACE"),
    tflite="models.cnn.tflite.TFLITE",
    scoring=Scoring(reader="data.scoring.image_example",
                    outputs=("classes", "probabilities"),   # models/cnn/export.py
                    signature="score_examples"),             # models/cnn/export.py: why not serving_default
    default_data="scikit-learn's bundled 8x8 digits (1797 images, 10 classes)",
    memory=Memory(batch=batch_memory),
    card=ModelCard(
        intended_use=("Classifying images like the training data (same source, size, colour mode and classes) "
                      "into one of the training classes; a demonstration of a gated, continuously trained TFX "
                      "pipeline, not a production classifier."),
        known_limits=(
            "Closed set: every image is put into one of the training classes, including images of none of them; "
            "the probability is not a calibrated 'none of these' signal.",
            "Images are resized to the training size and colour mode: other sizes, crops or lighting were not "
            "evaluated.",
            "The gate checks the overall eval accuracy; per-slice values (class, brightness) are reported, not "
            "gated.",
        )),
))

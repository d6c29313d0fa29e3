"""A tiny third model family, registered only inside the test suite: a dense classifier on
the digits. It proves the registry: nothing in pipeline/ or components/ names it, yet it gets
its own CLI option, defaults, gate metric, Transform/Trainer settings and TFMA config.

Its model code (``preprocessing_fn``, ``run_fn``) lives in this module, referenced by dotted
path like the built-in families' code in models/.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Any

from data.manifest import facts_in
from pipeline.families import ModelFamily, ReportParts, TrainingDefaults, option
from pipeline.settings import check_values

NAME = "dense"
LABEL_VOCABULARY = "dense_label"
PIXELS_XF = "pixels_xf"
LABEL_XF = "label_xf"


@dataclasses.dataclass(frozen=True)
class DenseSettings:
    hidden_units: int = option("--hidden-units", 24, low=1, high=4096, help="dense: units of the hidden layer")
    pixel_scale: float = option("--pixel-scale", 16.0, low=1e-6, high=1e6,
                                help="dense: pixels are divided by this (the digits' range is 16)")

    def __post_init__(self) -> None:
        check_values(self)


def preprocessing_fn(inputs: dict[str, Any], custom_config: dict[str, Any] | None = None):
    """Pixels scaled by ``pixel_scale``; class names to ids, the known ones reserved in order."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from data import features

    config = custom_config or {}
    label_id = tft.compute_and_apply_vocabulary(
        inputs[features.LABEL], vocab_filename=LABEL_VOCABULARY,
        reserved_tokens=list(facts_in(config).get("classes") or []) or None, num_oov_buckets=0, default_value=-1)
    return {PIXELS_XF: tf.cast(inputs[features.IMAGE], tf.float32) / float(config.get("pixel_scale", 255.0)),
            LABEL_XF: label_id}


def run_fn(fn_args) -> None:
    """Train Input -> Dense(hidden_units) -> softmax and export ``serving_default`` for TFMA."""
    import tensorflow as tf
    import tensorflow_transform as tft

    from data import features
    from models.common import signatures
    from models.common.inputs import make_dataset
    from models.common.training import TrainingSettings, fit

    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    tf.keras.utils.set_random_seed(settings.seed)
    transform_output = tft.TFTransformOutput(fn_args.transform_output)
    spec = transform_output.transformed_feature_spec()
    num_classes = transform_output.vocabulary_size_by_name(LABEL_VOCABULARY)
    train = make_dataset(fn_args.train_files, spec, LABEL_XF, settings.batch_size, seed=settings.seed)
    evaluation = make_dataset(fn_args.eval_files, spec, LABEL_XF, settings.batch_size, shuffle=False)
    pixels = tf.keras.Input(shape=spec[PIXELS_XF].shape, name=PIXELS_XF)
    hidden = tf.keras.layers.Dense(settings.family["hidden_units"], activation="relu")(pixels)
    model = tf.keras.Model(pixels, tf.keras.layers.Dense(num_classes, activation="softmax")(hidden))
    model.compile(optimizer=tf.keras.optimizers.Adam(settings.learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    fit(settings, model, train, evaluation, fn_args, logger=logging.getLogger(__name__))
    model.tft_layer = transform_output.transform_features_layer()
    raw_spec = {features.IMAGE: transform_output.raw_feature_spec()[features.IMAGE]}
    tf.saved_model.save(model, fn_args.serving_model_dir, signatures={
        "serving_default": signatures.examples_signature(
            model, raw_spec, lambda xf: {"probabilities": model({PIXELS_XF: xf[PIXELS_XF]})}),
        "transform_features": signatures.transform_features_signature(model, transform_output),
    })


def _eval_config(config, dataset):
    from stackenv.tfma import tfma

    from models.common.evaluation import overall_gate

    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key=LABEL_XF,
                                    preprocessing_function_names=["transform_features"],
                                    prediction_key="probabilities")],
        slicing_specs=[tfma.SlicingSpec(), tfma.SlicingSpec(feature_keys=["label"])],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="ExampleCount"),
            tfma.MetricConfig(class_name="SparseCategoricalAccuracy",
                              per_slice_thresholds=overall_gate(config.min_accuracy, config.max_regression))])])


def _prepare_digits(config):
    from data.images import prepare_image_dataset

    return prepare_image_dataset(config.data, config.data_cache_dir)


def _curate_schema(schema) -> None:
    from pipeline.families.schema_curation import keep_string_domains

    keep_string_domains(schema, ["label"])


FAMILY = ModelFamily(
    name=NAME,
    description="dense classifier, test-only",
    data_help="the same image sources as cnn, at their native size (default: the bundled digits)",
    defaults=TrainingDefaults(epochs=3, batch_size=32, learning_rate=5e-3, min_accuracy=0.5,
                              min_accuracy_note="a smoke-test floor"),
    gate_metric="sparse_categorical_accuracy",
    gate_metric_label="Accuracy",
    preprocessing_fn=f"{__name__}.preprocessing_fn",
    run_fn=f"{__name__}.run_fn",
    prepare_data=_prepare_digits,
    transform_config=lambda config, dataset: {
        "pixel_scale": config.family_settings.pixel_scale},
    trainer_config=lambda config, dataset: {"hidden_units": config.family_settings.hidden_units},
    eval_config=_eval_config,
    split_feature="example_id",
    curate_schema=_curate_schema,
    slicing_features=("label",),
    report=ReportParts(pictures="pipeline.report.pictures_cnn.cnn_pictures"),
    settings_type=DenseSettings,
    class_vocabulary=LABEL_VOCABULARY,
)

"""What the pipeline needs to know about each model family, in one table.

Model code stays orchestration-free: the pipeline refers to its functions by dotted path
(so a Kubeflow container imports them from the installed package, not from a local file)
and asks the family for its data preparation and evaluation config.
"""
import dataclasses
import hashlib
import pathlib
from typing import Any, Callable, Dict

import tensorflow_model_analysis as tfma
from tensorflow_metadata.proto.v0 import schema_pb2

from data.tfrecords import DatasetManifest
from pipeline.config import PipelineConfig

_MODELS_DIR = pathlib.Path(__file__).resolve().parent.parent / "models"


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    name: str
    preprocessing_fn: str                       # dotted path, run by Transform
    run_fn: str                                 # dotted path, run by Trainer
    prepare_data: Callable[[PipelineConfig], DatasetManifest]
    transform_config: Callable[[PipelineConfig, DatasetManifest], Dict[str, Any]]
    trainer_config: Callable[[DatasetManifest], Dict[str, Any]]
    eval_config: Callable[[PipelineConfig, DatasetManifest], tfma.EvalConfig]
    split_feature: str                          # ExampleGen hashes it into train/eval
    curate_schema: Callable[[schema_pb2.Schema], None]  # before pinning (pipeline/schema_pin.py)
    gate_metric: str                            # TFMA metric the blessing gate and summary use
    gate_metric_label: str

    def code_version(self) -> str:
        """Hash of the family's and the shared model code.

        Transform/Trainer reference code by dotted path, so TFX cannot see a code change;
        putting this hash in their custom_config makes such a change invalidate the cache.
        """
        digest = hashlib.sha256()
        for package in (_MODELS_DIR / "common", _MODELS_DIR / self.name):
            for path in sorted(package.rglob("*.py")):
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


def _prepare_images(config: PipelineConfig) -> DatasetManifest:
    from data.images import prepare_image_dataset

    dataset = prepare_image_dataset(config.data, config.data_cache_dir,
                                    image_size=config.image_size, channels=config.channels)
    if config.base_model:  # checked before TFX starts; a remote handle is resolved by the Trainer
        from data.errors import DataError
        from models.cnn.base_model import BaseModelError, describe, is_remote

        try:
            if not is_remote(config.base_model):
                describe(config.base_model)
        except BaseModelError as error:
            raise DataError(str(error)) from error
    return dataset


def _cnn_eval_config(config: PipelineConfig, dataset: DatasetManifest) -> tfma.EvalConfig:
    from models.cnn.evaluation import eval_config

    return eval_config(len(dataset.classes), config.min_accuracy, config.max_regression)


def _curate_image_schema(schema: schema_pb2.Schema) -> None:
    """The data contract: pixels are 0-255, classes are the known labels, brightness its buckets."""
    from data import features
    from pipeline.schema_pin import keep_string_domains

    keep_string_domains(schema, [features.LABEL, features.BRIGHTNESS])
    for feature in schema.feature:
        if feature.name == features.IMAGE:
            feature.int_domain.min, feature.int_domain.max = 0, 255


CNN = ModelFamily(
    name="cnn",
    preprocessing_fn="models.cnn.preprocessing.preprocessing_fn",
    run_fn="models.cnn.trainer.run_fn",
    prepare_data=_prepare_images,
    transform_config=lambda config, dataset: {"class_names": list(dataset.classes)},
    trainer_config=lambda dataset: {"image_shape": list(dataset.image_shape)},
    eval_config=_cnn_eval_config,
    split_feature="example_id",
    curate_schema=_curate_image_schema,
    gate_metric="sparse_categorical_accuracy",
    gate_metric_label="Accuracy",
)


def _prepare_text(config: PipelineConfig) -> DatasetManifest:
    from data.text import prepare_text_dataset

    return prepare_text_dataset(config.data, config.data_cache_dir, context_words=config.context_words,
                                target_words=config.target_words)


def _seq2seq_transform_config(config: PipelineConfig, dataset: DatasetManifest) -> Dict[str, Any]:
    # Token windows are wider than word windows: punctuation becomes tokens of its own.
    return {"vocab_size": config.vocab_size, "context_tokens": 2 * config.context_words,
            "target_tokens": 2 * config.target_words}


def _seq2seq_eval_config(config: PipelineConfig, dataset: DatasetManifest) -> tfma.EvalConfig:
    from models.seq2seq.evaluation import eval_config

    return eval_config(config.min_accuracy, config.max_regression)


def _curate_text_schema(schema: schema_pb2.Schema) -> None:
    """Documents and windows are open-ended; only the position buckets are a closed set."""
    from data import text_features
    from pipeline.schema_pin import keep_string_domains

    keep_string_domains(schema, [text_features.POSITION])


SEQ2SEQ = ModelFamily(
    name="seq2seq",
    preprocessing_fn="models.seq2seq.preprocessing.preprocessing_fn",
    run_fn="models.seq2seq.trainer.run_fn",
    prepare_data=_prepare_text,
    transform_config=_seq2seq_transform_config,
    trainer_config=lambda dataset: {},
    eval_config=_seq2seq_eval_config,
    # Whole documents go to one split: overlapping windows of one text must not leak from
    # train into eval (README: "Text data").
    split_feature="document",
    curate_schema=_curate_text_schema,
    gate_metric="sparse_top_k_categorical_accuracy",
    gate_metric_label="Top-5 next-word accuracy",
)

FAMILIES = {family.name: family for family in (CNN, SEQ2SEQ)}


def get_family(name: str) -> ModelFamily:
    return FAMILIES[name]

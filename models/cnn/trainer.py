"""TFX Trainer entry point for the CNN family (``run_fn`` is referenced by dotted path)."""
import logging

import tensorflow as tf
import tensorflow_transform as tft
from tfx.components.trainer.fn_args_utils import FnArgs

from models.cnn import export, features, model as cnn_model
from models.common.distribution import make_strategy
from models.common.inputs import make_dataset
from models.common.multi_worker import export_dir
from models.common.training import TrainingSettings

log = logging.getLogger(__name__)


def run_fn(fn_args: FnArgs) -> None:
    settings = TrainingSettings.from_custom_config(fn_args.custom_config)
    image_shape = settings.family["image_shape"]
    tf.keras.utils.set_random_seed(settings.seed)
    tf_transform_output = tft.TFTransformOutput(fn_args.transform_output)
    num_classes = tf_transform_output.vocabulary_size_by_name(features.LABEL_VOCABULARY)

    strategy = make_strategy(settings.strategy)
    global_batch = settings.batch_size * strategy.num_replicas_in_sync
    spec = tf_transform_output.transformed_feature_spec()
    train = make_dataset(fn_args.train_files, spec, features.LABEL_XF, global_batch,
                         seed=settings.seed, **settings.input_options())
    evaluation = make_dataset(fn_args.eval_files, spec, features.LABEL_XF, global_batch,
                              shuffle=False, repeat=True, **settings.input_options())

    with strategy.scope():
        model = cnn_model.build_cnn(image_shape, num_classes, settings.learning_rate,
                                    jit_compile=settings.jit_compile)
    steps_per_epoch = settings.steps_per_epoch(fn_args.train_steps)
    log.info("Training CNN %s -> %d classes: %d steps (%d epochs x %d), global batch %d",
             image_shape, num_classes, steps_per_epoch * settings.epochs, settings.epochs,
             steps_per_epoch, global_batch)
    settings.fit(model, train, evaluation, fn_args, log)
    with export_dir(strategy, fn_args.serving_model_dir) as target:  # chief only (multi_worker.py)
        export.export_serving_model(model, tf_transform_output, target, image_shape)

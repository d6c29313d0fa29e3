"""The speed fixes benchmarks/README.md measured stay in place (behaviour, not timings)."""
import json
import logging
import subprocess
import sys
import types

import pytest
from conftest import PROJECT_ROOT


def _modules_loaded_by(code: str) -> set:
    probe = f"import json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


def test_a_run_does_not_import_tfx_v1_or_vertex_ai():
    modules = _modules_loaded_by("import stackenv, pipeline.graph, pipeline.local.runner, pipeline.results.summary")
    assert "tfx.components" in modules  # the probe really loaded the pipeline
    assert "tfx.v1" not in modules
    assert not any(m.startswith("google.cloud.aiplatform") for m in modules)


def test_cli_help_does_not_import_tensorflow():
    modules = _modules_loaded_by("import stackenv, pipeline.cli\n"
                                 "try:\n    pipeline.cli.build_parser().parse_args(['run', '--help'])\n"
                                 "except SystemExit:\n    pass")
    assert "pipeline.cli" in modules
    assert "tensorflow" not in modules and "tfx" not in modules


def test_training_keeps_autograph_out_of_tf_keras(tmp_path):
    from stackenv import compat

    import tensorflow as tf
    import tf_keras
    from tensorflow.python.autograph.impl import conversion

    from models.common.autograph import TF_KERAS, convert_tf_keras
    from models.common.training import TrainingSettings, fit

    convert_tf_keras(True)  # TensorFlow's own rules: tf_keras gets converted
    assert not conversion.is_allowlisted(tf_keras.Model.train_step)
    model = tf_keras.Sequential([tf_keras.Input((4,)), tf_keras.layers.Dense(2)])
    model.compile(optimizer="adam", loss="mse")
    data = tf.data.Dataset.from_tensors((tf.zeros([8, 4]), tf.zeros([8, 2]))).repeat()
    fn_args = types.SimpleNamespace(train_steps=2, eval_steps=1, model_run_dir=str(tmp_path))
    history = fit(TrainingSettings(epochs=1), model, data, data, fn_args, logger=logging.getLogger("test"))
    assert len(history.history["loss"]) == 1
    assert compat.autograph_skips(TF_KERAS)  # tf_keras left as is again
    assert conversion.is_allowlisted(tf_keras.Model.train_step)
    assert not conversion.is_allowlisted(test_training_keeps_autograph_out_of_tf_keras)  # our code still is


def test_the_early_stopping_regime_keeps_autograph_out_of_tf_keras_too():
    """The CNN trains through regime.fit_with_holdout, not TrainingSettings.fit: without the
    same switch its first fit transpiled tf_keras again (the cold digits Trainer 47 s)."""
    from stackenv import compat

    import numpy as np
    import tf_keras
    from tensorflow.python.autograph.impl import conversion

    from models.common import regime
    from models.common.autograph import TF_KERAS, convert_tf_keras

    convert_tf_keras(True)

    def build():
        model = tf_keras.Sequential([tf_keras.Input((4,), name="x"), tf_keras.layers.Dense(2, activation="softmax")])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
        return model

    x = np.random.RandomState(0).normal(size=(40, 4)).astype(np.float32)
    regime.fit_with_holdout(build, {"x": x}, np.arange(40) % 2, batch_size=8, min_steps=2, max_steps=2,
                            patience_steps=1, holdout_fraction=0.2, class_weights="off", num_classes=2)
    assert compat.autograph_skips(TF_KERAS)  # tf_keras left as is again
    assert conversion.is_allowlisted(tf_keras.Model.train_step)


@pytest.mark.parametrize("cpus, examples, expected", [
    (2, 100_000, "in_memory"),        # measured: multi_processing 2x slower on 2 cores
    (8, 100_000, "multi_processing"),
    (8, 1_797, "in_memory"),          # worker start-up outweighs the gain on small data
])
def test_auto_beam_mode(monkeypatch, cpus, examples, expected):
    from pipeline import config as config_module

    monkeypatch.setattr(config_module.os, "cpu_count", lambda: cpus)
    config = config_module.PipelineConfig(beam_workers=cpus)
    assert config.direct_running_mode(examples) == expected
    assert f"--direct_running_mode={expected}" in config.beam_pipeline_args(examples)


@pytest.mark.parametrize("transform_statistics", [False, True])
def test_transform_statistics_knob(tmp_path, digits_dataset, transform_statistics):
    from pipeline.config import PipelineConfig
    from pipeline.graph import TRANSFORM, create_pipeline

    config = PipelineConfig(output_dir=str(tmp_path), transform_statistics=transform_statistics)
    pipeline = create_pipeline(config, digits_dataset)
    transform = next(c for c in pipeline.components if c.id == TRANSFORM)
    assert bool(transform.exec_properties["disable_statistics"]) is not transform_statistics
    assert ("post_transform_stats" in transform.outputs) is transform_statistics

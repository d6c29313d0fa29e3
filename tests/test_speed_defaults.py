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


@pytest.mark.parametrize("mode, workers, beam_args, expected", [
    ("auto", 2, [], {"StatisticsGen": ["--direct_num_workers=2"]}),    # what a 2-core laptop gets
    ("in_memory", 4, [], {"StatisticsGen": ["--direct_num_workers=4"]}),
    ("in_memory", 1, [], {}),
    ("multi_processing", 2, [], {}),                                    # its workers are processes already
    ("auto", 2, ["--direct_num_workers=1"], {}),                        # the user's own choice wins
    ("auto", 2, ["--runner=FlinkRunner"], {}),
])
def test_statistics_gen_reads_on_the_beam_workers_threads_in_memory(monkeypatch, mode, workers, beam_args,
                                                                     expected):
    from pipeline import config as config_module

    monkeypatch.setattr(config_module.os, "cpu_count", lambda: 2)
    config = config_module.PipelineConfig(beam_mode=mode, beam_workers=workers, beam_args=beam_args)
    assert config.component_beam_args(1_000) == expected


def test_the_graph_gives_statistics_gen_its_threads_after_the_pipeline_args(tmp_path, digits_dataset):
    # TFX puts a pipeline's Beam args before a component's, and Beam's parser keeps the last value.
    from pipeline.config import PipelineConfig
    from pipeline.graph import STATISTICS_GEN, create_pipeline

    config = PipelineConfig(output_dir=str(tmp_path))
    pipeline = create_pipeline(config, digits_dataset, beam_pipeline_args=["--direct_num_workers=1"],
                               component_beam_args={STATISTICS_GEN: ["--direct_num_workers=2"]})
    args = {c.id: list(c.executor_spec.beam_pipeline_args) for c in pipeline.components
            if hasattr(c.executor_spec, "beam_pipeline_args")}
    assert args[STATISTICS_GEN] == ["--direct_num_workers=1", "--direct_num_workers=2"]
    assert all(a == ["--direct_num_workers=1"] for name, a in args.items() if name != STATISTICS_GEN), args


def test_statistics_gen_on_two_threads_counts_what_one_counts(tmp_path):
    # The real StatisticsGen executor on the image ExampleGen's two files a split: each example is
    # counted once whether Beam's in_memory runner reads the files on one thread or two.
    import json

    import numpy as np
    import tensorflow_data_validation as tfdv
    from PIL import Image
    from support.example_gen_helpers import run_example_gen
    from tfx.components.statistics_gen.executor import Executor
    from tfx.types import artifact_utils, standard_artifacts

    from components.image_example_gen import ImageExampleGenExecutor
    from components.ingest_config import settings_config

    rng = np.random.default_rng(3)
    for cls, count in (("a", 70), ("b", 50)):
        (tmp_path / "images" / cls).mkdir(parents=True)
        for i in range(count):
            Image.fromarray(rng.integers(0, 256, (6, 6), dtype=np.uint8)).save(tmp_path / "images" / cls / f"{i}.png")
    written = run_example_gen(ImageExampleGenExecutor, str(tmp_path / "images"), tmp_path / "examples",
                              custom_config=settings_config(image_size=6, channels=1))
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "examples")
    examples.split_names = artifact_utils.encode_split_names(list(written))

    def statistics(workers: int) -> dict:
        out = standard_artifacts.ExampleStatistics()
        out.uri = str(tmp_path / f"statistics-{workers}")
        Executor(Executor.Context(beam_pipeline_args=["--direct_running_mode=in_memory",
                                                      f"--direct_num_workers={workers}"])).Do(
            {"examples": [examples]}, {"statistics": [out]},
            {"exclude_splits": json.dumps([]),
             "stats_options_json": tfdv.StatsOptions(use_sketch_based_topk_uniques=True).to_json()})
        counted = {}
        for split in written:
            stats = tfdv.load_stats_binary(f"{out.uri}/Split-{split}/FeatureStats.pb").datasets[0]
            label = next(f for f in stats.features if f.path.step == ["label"])
            counted[split] = (stats.num_examples, sorted((v.value, v.frequency)
                                                         for v in label.string_stats.top_values))
        return counted

    one, two = statistics(1), statistics(2)
    assert two == one
    assert {split: n for split, (n, _) in one.items()} == {split: len(r) for split, r in written.items()}


@pytest.mark.parametrize("transform_statistics", [False, True])
def test_transform_statistics_knob(tmp_path, digits_dataset, transform_statistics):
    from pipeline.config import PipelineConfig
    from pipeline.graph import TRANSFORM, create_pipeline

    config = PipelineConfig(output_dir=str(tmp_path), transform_statistics=transform_statistics)
    pipeline = create_pipeline(config, digits_dataset)
    transform = next(c for c in pipeline.components if c.id == TRANSFORM)
    assert bool(transform.exec_properties["disable_statistics"]) is not transform_statistics
    assert ("post_transform_stats" in transform.outputs) is transform_statistics

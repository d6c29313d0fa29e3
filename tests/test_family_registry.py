"""The family registry: a family is one registration, and a third one needs no edit elsewhere.

Fast unit tests of the registry, then a tiny third family (tests/support/dense_family.py: a dense
classifier on the digits) registered for the duration of a test and taken through
config -> ``pipeline.graph.create_pipeline`` -> the Kubeflow compile.
"""
import json

import pytest
from support import dense_family

from pipeline import families
from pipeline.arguments import build_parser, config_from_args
from pipeline.config import PipelineConfig
from pipeline.kubeflow.fresh_data import RESOLVE_TASK
from pipeline.kubeflow.report_step import REPORT_TASK

IMAGE = "registry.example.com/tfx-project:test"


def _run_help(capsys) -> str:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["run", "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


# ----------------------------------------------------------------------------- registry


def test_unknown_family_is_a_clear_error_listing_the_known_ones():
    with pytest.raises(families.UnknownFamilyError) as error:
        PipelineConfig(model="transformer")
    message = str(error.value)
    assert "'transformer'" in message and "cnn, seq2seq" in message
    assert isinstance(error.value, ValueError)  # the CLI reports ValueErrors of the config as user errors


@pytest.mark.parametrize("name", ["cnn", "seq2seq"])
def test_training_defaults_come_from_the_family(name):
    family = families.get_family(name)
    config = PipelineConfig(model=name)
    assert (config.epochs, config.batch_size, config.learning_rate, config.min_accuracy) == (
        family.defaults.epochs, family.defaults.batch_size, family.defaults.learning_rate,
        family.defaults.min_accuracy)
    assert config.family_settings == family.settings_type()
    given = PipelineConfig(model=name, epochs=2, min_accuracy=0.123)
    assert (given.epochs, given.min_accuracy) == (2, 0.123)


def test_family_settings_are_typed_and_checked():
    config = PipelineConfig(model="seq2seq", family_settings={"vocab_size": 800})
    assert (config.family_settings.vocab_size, config.family_settings.context_words) == (800, 16)
    with pytest.raises(ValueError, match="--context-words: must be a number from 1 to 512, got 0"):
        PipelineConfig(model="seq2seq", family_settings={"context_words": 0})
    with pytest.raises(ValueError, match=r"'cnn' has no settings \['vocab_size'\].*channels"):
        PipelineConfig(model="cnn", family_settings={"vocab_size": 800})


def test_text_defaults_agree_with_the_library_defaults_below_the_pipeline():
    """data/ and models/ keep defaults for direct callers; the registration's must be the same."""
    from data.text import DEFAULT_CONTEXT_WORDS, DEFAULT_TARGET_WORDS
    from models.seq2seq.features import TRANSFORM_DEFAULTS, VOCAB_SIZE

    settings = families.get_family("seq2seq").settings()
    assert (settings.context_words, settings.target_words, settings.vocab_size) == (
        DEFAULT_CONTEXT_WORDS, DEFAULT_TARGET_WORDS, TRANSFORM_DEFAULTS[VOCAB_SIZE])


def test_cli_options_are_declared_by_the_families_and_fill_their_settings(capsys):
    args = build_parser().parse_args(["run", "--model", "seq2seq", "--vocab-size", "800", "--context-words", "8"])
    config = config_from_args(args)
    assert (config.family_settings.vocab_size, config.family_settings.context_words) == (800, 8)
    config = config_from_args(build_parser().parse_args(["prepare", "--image-size", "12", "--channels", "1"]))
    assert (config.model, config.family_settings.image_size, config.family_settings.channels) == ("cnn", 12, 1)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--channels", "2"])  # the family's choices still apply
    capsys.readouterr()
    text = " ".join(_run_help(capsys).split())
    assert "cnn (image classifier) or seq2seq (text continuation)" in text
    assert "(1 to 100000; default: cnn 15 (while the train split fits" in text
    assert "streamed), seq2seq 6 (at most, and 20000 steps or 30 minutes" in text  # tests/test_step_budget_doc.py
    assert "(1e-09 to 10; default: cnn 0.001, seq2seq 0.003)" in text
    assert "--batch-size BATCH_SIZE batch size per replica (1 to 65536; default: 64)" in text
    assert "(cnn: accuracy, seq2seq: top-5 next-word accuracy) >= this, on top of --gate-margin (0 to 1; default: " \
           "cnn 0.0, gated on its reference predictors, seq2seq 0.0, gated on its strongest n-gram reference)" in text
    assert "--runner" not in text.replace("--runner=FlinkRunner", "")


def test_registering_a_taken_name_fails():
    clash = families.ModelFamily(**{**vars(dense_family.FAMILY), "name": "cnn"})
    with pytest.raises(ValueError, match="already registered"):
        families.register(clash)
    assert families.get_family("cnn").run_fn == "models.cnn.trainer.run_fn"


def test_family_of_trainer_properties():
    from ml_metadata.proto import metadata_store_pb2

    recorded = {"custom_config": json.dumps({"model_family": "seq2seq", "training": {}}),
                "run_fn": "models.cnn.trainer.run_fn"}
    assert families.family_of_trainer_properties(recorded) == "seq2seq"  # the record wins over run_fn
    assert families.family_of_trainer_properties({"run_fn": "models.cnn.trainer.run_fn"}) == "cnn"  # older runs
    assert families.family_of_trainer_properties({"run_fn": "elsewhere.run_fn", "custom_config": "{}"}) is None
    execution = metadata_store_pb2.Execution()
    execution.custom_properties["custom_config"].string_value = json.dumps({"model_family": "cnn"})
    assert families.family_of_trainer_properties(execution) == "cnn"


def test_served_versions_list_every_registered_gate_metric(tmp_path):
    from artifacts import serving_dir
    from pipeline.serving_commands import list_models

    version = tmp_path / "1700000000"
    version.mkdir()
    (version / "saved_model.pb").write_bytes(b"")
    info = {"pushed_at": "2026-11-22T00:00:00", "metrics": {"sparse_top_k_categorical_accuracy": 0.5,
                                                            "example_count": 10.0, "other": 1.0}}
    (version / serving_dir.PUSH_INFO_FILE).write_text(json.dumps(info))
    assert serving_dir.list_versions(str(tmp_path)) == [1700000000]
    line = list_models(str(tmp_path))[1]
    assert "sparse_top_k_categorical_accuracy=0.5000  n=10" in line and "other" not in line


# ----------------------------------------------------------------------------- a third family


def test_a_third_family_is_one_registration(capsys, tmp_path):
    with families.registered(dense_family.FAMILY):
        help_text = " ".join(_run_help(capsys).split())
        assert "seq2seq (text continuation) or dense (dense classifier, test-only)" in help_text
        assert "--hidden-units HIDDEN_UNITS dense: units of the hidden layer (1 to 4096; default: 24)" in help_text
        assert "and the best is kept), dense 3)" in help_text  # a family without a note: its passes alone
        assert "dense: accuracy" in help_text and "dense 0.5, a smoke-test floor" in help_text
        args = build_parser().parse_args(["run", "--model", "dense", "--hidden-units", "7",
                                          "--output", str(tmp_path)])
        config = config_from_args(args)
        assert config.family_settings == dense_family.DenseSettings(hidden_units=7)
        assert (config.epochs, config.batch_size, config.pipeline_name, config.serving_model_name) == (
            3, 32, "dense-pipeline", "dense")
    assert "dense" not in families.FAMILIES
    with pytest.raises(families.UnknownFamilyError, match="cnn, seq2seq"):
        PipelineConfig(model="dense")


@pytest.fixture(scope="module")
def third_family_compiled(tmp_path_factory):
    """The dense family through config -> graph -> Kubeflow compile: (config, local pipeline, spec)."""
    import yaml

    from pipeline.graph import create_pipeline
    from pipeline.kubeflow.compile import compile_pipeline, dataset_for_cluster

    root = tmp_path_factory.mktemp("dense-family")
    with families.registered(dense_family.FAMILY) as family:
        config = PipelineConfig(model="dense", output_dir=str(root / "root"), train_steps=20,
                                family_settings={"hidden_units": 7, "pixel_scale": 8.0})
        dataset = dataset_for_cluster(config, family.prepare_data)
        local = create_pipeline(config, dataset)
        package = compile_pipeline(config, dataset, IMAGE, str(root / "dense.yaml"))
        with open(package) as handle:
            spec = yaml.safe_load(handle)
        code_version = family.code_version()
    return config, local, spec, code_version


def test_third_family_components_and_settings_reach_the_compiled_spec(third_family_compiled):
    config, local, spec, code_version = third_family_compiled
    tasks = spec["root"]["dag"]["tasks"]
    assert spec["pipelineInfo"]["name"] == "dense-pipeline"
    assert set(tasks) - {RESOLVE_TASK, REPORT_TASK} == {c.id for c in local.components} == {
        "ImportExampleGen", "StatisticsGen", "SchemaGen", "ExampleValidator", "Transform", "Trainer",
        "Evaluator", "Pusher"}
    params = {t: {k: v["runtimeValue"]["constant"] for k, v in body.get("inputs", {}).get("parameters", {}).items()
                  if "runtimeValue" in v} for t, body in tasks.items()}
    assert params["Transform"]["preprocessing_fn"] == "support.dense_family.preprocessing_fn"
    assert params["Trainer"]["run_fn"] == "support.dense_family.run_fn"
    transform_config = json.loads(params["Transform"]["custom_config"])
    assert transform_config["pixel_scale"] == 8.0 and transform_config["code_version"] == code_version
    assert transform_config["data_facts"]["classes"] == [str(d) for d in range(10)]  # the prepared manifest's
    trainer_config = json.loads(params["Trainer"]["custom_config"])
    assert trainer_config["model_family"] == "dense"
    assert trainer_config["training"]["family"] == {"hidden_units": 7}
    assert (trainer_config["training"]["batch_size"], trainer_config["training"]["learning_rate"]) == (32, 5e-3)
    assert json.loads(params["Trainer"]["train_args"])["num_steps"] == 20
    split = json.loads(params["ImportExampleGen"]["output_config"])["split_config"]
    assert split["partition_feature_name"] == "example_id"
    eval_config = json.loads(params["Evaluator"]["eval_config"])
    assert eval_config["model_specs"][0]["label_key"] == "label_xf"
    assert {"feature_keys": ["label"]} in eval_config["slicing_specs"]
    gate = eval_config["metrics_specs"][0]["metrics"][1]["per_slice_thresholds"][0]["threshold"]
    assert gate["value_threshold"]["lower_bound"] == 0.5  # the family's min_accuracy default
    assert params["Evaluator"]["baseline_serving_dir"].endswith("/serving/dense")
    assert families.family_of_trainer_properties(
        {"custom_config": params["Trainer"]["custom_config"]}) == "dense"


def test_third_family_code_version_hashes_its_own_code(third_family_compiled, tmp_path, monkeypatch):
    """Its model code lives outside models/: editing it must still invalidate the pipeline cache."""
    import dataclasses

    _, _, _, code_version = third_family_compiled
    assert code_version == dense_family.FAMILY.code_version() != families.get_family("cnn").code_version()
    module = tmp_path / "edited_dense_family.py"
    module.write_text(open(dense_family.__file__).read())
    monkeypatch.syspath_prepend(str(tmp_path))
    edited = dataclasses.replace(dense_family.FAMILY, run_fn="edited_dense_family.run_fn")
    before = edited.code_version()
    assert edited.code_version() == before  # unchanged code, unchanged hash
    module.write_text(module.read_text() + "\n# edited\n")
    assert edited.code_version() != before


@pytest.mark.parametrize("name", ["cnn", "seq2seq"])
def test_report_hooks_of_the_built_in_families_resolve(name):
    """The dotted paths the report calls must name functions (they break if the report code moves)."""
    family = families.get_family(name)
    assert callable(family.report_pictures_function())
    if family.report.samples:
        assert callable(families.load_function(family.report.samples))


@pytest.mark.parametrize("name", ["cnn", "seq2seq"])
def test_declared_gate_metric_and_slices_are_what_the_evaluator_uses(name):
    """The registration's gate metric names the thresholded metric of its TFMA config, under
    the name TFMA reports it (the metric TFMA builds from the config); its slicing features are the config's."""
    import types

    from tensorflow_model_analysis.metrics import metric_specs

    family = families.get_family(name)
    eval_config = family.eval_config(PipelineConfig(model=name), types.SimpleNamespace(classes=["a", "b"]))
    sliced = [key for spec in eval_config.slicing_specs for key in spec.feature_keys]
    assert tuple(sliced) == family.slicing_features
    gated = [m for spec in eval_config.metrics_specs for m in spec.metrics if m.per_slice_thresholds]
    assert len(gated) == 1
    assert metric_specs.metric_instance(gated[0]).name == family.gate_metric


def test_score_with_a_family_that_declares_no_reader_is_one_paragraph(tmp_path):
    from stackenv.errors import ConfigError

    from pipeline.graph import create_pipeline
    from pipeline.kubeflow.compile import dataset_for_cluster

    with families.registered(dense_family.FAMILY) as family:
        config = PipelineConfig(model="dense", output_dir=str(tmp_path / "out"), score_dir=str(tmp_path / "score"))
        with pytest.raises(ConfigError, match="--score.*model family 'dense' declares no reader of files to score"):
            create_pipeline(config, dataset_for_cluster(config, family.prepare_data))

"""The Pusher and the evaluation it is given: a blessed model whose metrics are not finite is not
pushed (TFMA compares nan with a threshold as "not below it", so the gate can pass it), and
push_info.json records the evaluation's overall metrics.

The evaluations are real TFMA runs (``tfma.run_model_analysis``, model-agnostic: the predictions are
stored in the examples), on four examples whose labels and predictions are written here, so the
expected metrics come from the formulas, not from TFMA or the project.
"""
import json
import logging
import os

import pytest
import tensorflow as tf
from test_serving_dir import saved_model  # noqa: F401 - the tiny SavedModel fixture
from tfx.proto import pusher_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

from artifacts import serving_dir
from components import pusher

LABELS = [0.0, 1.0, 1.0, 0.0]
PREDICTIONS = [0.2, 0.9, 0.6, 0.4]


def _evaluation(root, predictions) -> str:
    """A TFMA evaluation of stored predictions: example count, mean squared error, mean prediction."""
    from stackenv.tfma import tfma

    from google.protobuf import text_format

    data = str(root / "examples.tfrecord")
    with tf.io.TFRecordWriter(data) as writer:
        for label, prediction in zip(LABELS, predictions):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "label": tf.train.Feature(float_list=tf.train.FloatList(value=[label])),
                "prediction": tf.train.Feature(float_list=tf.train.FloatList(value=[prediction]))}))
                .SerializeToString())
    config = text_format.Parse("""
        model_specs { label_key: "label" prediction_key: "prediction" }
        metrics_specs { metrics { class_name: "ExampleCount" } metrics { class_name: "MeanSquaredError" }
                        metrics { class_name: "MeanPrediction" } }
        slicing_specs {}""", tfma.EvalConfig())
    tfma.run_model_analysis(eval_config=config, data_location=data, output_path=str(root / "evaluation"))
    return str(root / "evaluation")


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory):
    finite = _evaluation(tmp_path_factory.mktemp("finite"), PREDICTIONS)
    diverged = _evaluation(tmp_path_factory.mktemp("nan"), PREDICTIONS[:-1] + [float("nan")])
    return finite, diverged


def _push(model_uri: str, evaluation_uri: str, base: str, tmp_path):
    """The Pusher's executor with a blessed model and an evaluation, as the pipeline wires it."""
    model, blessing, evaluation = (standard_artifacts.Model(), standard_artifacts.ModelBlessing(),
                                   standard_artifacts.ModelEvaluation())
    model.uri, blessing.uri, evaluation.uri = model_uri, str(tmp_path / "blessing"), evaluation_uri
    blessing.set_int_custom_property("blessed", 1)
    pushed = standard_artifacts.PushedModel()
    pushed.uri = str(tmp_path / "pushed")
    destination = pusher_pb2.PushDestination(filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base))
    pusher.Executor().Do(
        {standard_component_specs.MODEL_KEY: [model], standard_component_specs.MODEL_BLESSING_KEY: [blessing],
         pusher.EVALUATION_KEY: [evaluation]},
        {standard_component_specs.PUSHED_MODEL_KEY: [pushed]},
        {standard_component_specs.PUSH_DESTINATION_KEY: proto_utils.proto_to_json(destination)})
    return pushed


def test_push_info_records_the_evaluations_overall_metrics(saved_model, evaluations, tmp_path):  # noqa: F811
    base = str(tmp_path / "serving")
    pushed = _push(saved_model, evaluations[0], base, tmp_path)
    assert pushed.get_int_custom_property("pushed") == 1
    (version,) = serving_dir.list_versions(base)
    with open(os.path.join(base, str(version), serving_dir.PUSH_INFO_FILE)) as handle:
        info = json.load(handle)
    squared = [(p - y) ** 2 for p, y in zip(PREDICTIONS, LABELS)]
    assert info["metrics"] == pytest.approx({"example_count": 4.0, "mean_squared_error": sum(squared) / 4,
                                             "mean_prediction": sum(PREDICTIONS) / 4})
    assert info["model_uri"] == saved_model and info["version"] == version


def test_a_blessed_model_with_a_nan_metric_is_not_pushed(saved_model, evaluations, tmp_path, caplog):  # noqa: F811
    base = str(tmp_path / "serving")
    with caplog.at_level(logging.WARNING, logger=pusher.__name__):
        pushed = _push(saved_model, evaluations[1], base, tmp_path)
    assert pushed.get_int_custom_property("pushed") == 0
    assert serving_dir.list_versions(base) == []
    warning = " ".join(record.getMessage() for record in caplog.records)
    assert "blessed but not pushed" in warning
    assert "mean_prediction" in warning and "example_count" not in warning  # the nan one is named

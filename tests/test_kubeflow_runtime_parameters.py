"""Runtime parameters: what the entrypoint folds into a step, what deploy accepts, what KFP's server refuses.

The compiled wiring is checked in tests/test_kubeflow_compile.py and a whole run with changed values in
tests/test_kubeflow_contract.py; these are the quick cases around them, on the family's real EvalConfig.
"""
import json

from stackenv.errors import ConfigError
from stackenv.tfma import tfma

import pytest
from google.protobuf import json_format
from support.kfp_contract import TaskFailed, root_parameters
from tfx.utils import proto_utils

from models.cnn.evaluation import eval_config
from models.common.training import TrainingSettings
from pipeline.kubeflow.runtime_parameters import (
    RUNTIME_PARAMETERS,
    apply_to_executor_input,
    parse_assignments,
    typed_root_parameters,
)
from pipeline.kubeflow.storage import KubeflowConfigError


def _executor_input(**runtime) -> dict:
    return {"inputs": {"parameterValues": {
        "custom_config": json.dumps({"training": {"epochs": 15, "learning_rate": 0.001, "gate_margin": 0.01},
                                     "model_family": "cnn"}),
        "eval_config": proto_utils.proto_to_json(eval_config(10, 0.5, 0.01)),
        **{f"runtime_{name}": value for name, value in runtime.items()}}}}


def test_values_are_folded_into_the_properties_tfx_reads():
    executor_input = _executor_input(epochs=3.0, learning_rate=0.05, min_accuracy=0.7, max_regression=0.2)
    applied = apply_to_executor_input(executor_input)
    parameters = executor_input["inputs"]["parameterValues"]
    assert not [k for k in parameters if k.startswith("runtime_")]  # TFX never sees them
    assert applied["epochs"] == 3
    training = json.loads(parameters["custom_config"])["training"]
    assert TrainingSettings.from_custom_config({"training": training}).epochs == 3
    assert training["learning_rate"] == 0.05 and training["gate_margin"] == 0.01
    config = json_format.Parse(parameters["eval_config"], tfma.EvalConfig())  # what TFX's Evaluator parses
    gate = config.metrics_specs[0].metrics[1].per_slice_thresholds[0].threshold
    assert gate.value_threshold.lower_bound.value == 0.7
    assert gate.change_threshold.absolute.value == pytest.approx(-0.2)


@pytest.mark.parametrize("runtime, expected", [
    ({"epochs": 0.0}, "--epochs"), ({"epochs": 2.5}, "whole number"), ({"min_accuracy": 1.5}, "--min-accuracy"),
    ({"learning_rate": -1.0}, "--learning-rate"),
])
def test_a_value_out_of_range_stops_the_step_with_the_settings_paragraph(runtime, expected):
    with pytest.raises((ConfigError, KubeflowConfigError), match=expected):
        apply_to_executor_input(_executor_input(**runtime))


SPEC = {"root": {"inputDefinitions": {"parameters": {
    "epochs": {"parameterType": "NUMBER_INTEGER", "defaultValue": 15},
    "data": {"parameterType": "STRING", "defaultValue": "bundled:digits"}}}}}


def test_deploy_param_is_typed_by_the_package():
    assert parse_assignments(SPEC, ["epochs=3", "data=gs://b/new"]) == {"epochs": 3, "data": "gs://b/new"}
    for bad, expected in (("epochs=three", "NUMBER_INTEGER"), ("lr=1", "it has: data, epochs"),
                          ("epochs=0", "--epochs")):
        with pytest.raises((ConfigError, KubeflowConfigError), match=expected):
            parse_assignments(SPEC, [bad])
    assert set(RUNTIME_PARAMETERS) >= {"data", "epochs"}


def test_the_emulated_server_refuses_an_untyped_parameter_and_fills_defaults():
    """apiserver v2_template.go: a run value for a parameter without parameterType is refused; TFX's
    spec-2.1 runtime parameters come that way, so typed_root_parameters types them from their default."""
    untyped = {"root": {"inputDefinitions": {"parameters": {"epochs": {"defaultValue": 15}}}}}
    with pytest.raises(TaskFailed, match="has unspecified type"):
        root_parameters(untyped, {"epochs": 2})
    assert root_parameters(typed_root_parameters(untyped), {"epochs": 2}) == {"epochs": 2.0}
    assert root_parameters(SPEC, {}) == {"epochs": 15.0, "data": "bundled:digits"}
    with pytest.raises(TaskFailed, match="requires type NUMBER_INTEGER"):
        root_parameters(SPEC, {"epochs": "2"})

"""Run settings a KFP user sets when creating a run, not when compiling: KFP runtime parameters.

TFX's own ``RuntimeParameter`` cannot reach these settings: they live inside JSON execution
properties (the Trainer's ``custom_config``, the Evaluator's ``eval_config``), and TFX 1.16
writes runtime parameters into the spec without a default (its YAML writer drops
``runtimeConfig``). So the compiled spec gets them here, after TFX's compiler:

- the root component declares each one with its ``parameterType`` and the compiled value as
  ``defaultValue``. A KFP 2.x API server rejects a run value for a parameter whose type is
  unspecified ("has unspecified type", backend 2.3.0 ``src/apiserver/template/v2_template.go``
  validatePipelineJobInputs) and fills missing ones from these defaults
  (``src/v2/compiler/argocompiler/argo.go``);
- each task that uses one takes it as ``componentInputParameter`` (resolved by
  ``src/v2/driver/driver.go`` resolveInputs from the root's values). ``data`` replaces the
  ``input_base`` of the input-resolution step and the ExampleGen directly; the others arrive
  as ``runtime_<name>`` parameters that the container entrypoint folds into the execution
  property they belong to before TFX reads it (``apply_to_executor_input``) and removes.

KFP's cache key holds the input parameter values, so a run with another value re-runs the
steps that use it (and everything downstream, whose input artifacts change).
"""
from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pipeline.config import PipelineConfig
from pipeline.kubeflow.storage import KubeflowConfigError
from pipeline.settings import runtime_settings

#: PipelineConfig fields a run can set at creation (``deploy --param NAME=VALUE``, the KFP UI): the settings
#: declared with ``runtime=True`` in pipeline/config.py; everything below derives from it.
RUNTIME_PARAMETERS = tuple(field.name for field, _ in runtime_settings(PipelineConfig))
#: How a task receives a runtime parameter it folds into an execution property.
TASK_PREFIX = "runtime_"

_TRAINING = ("epochs", "learning_rate", "gate_margin")  # custom_config["training"][name]
_GATE = ("min_accuracy", "max_regression")             # the blessing gate in eval_config
_KIND = {bool: "BOOLEAN", int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE", str: "STRING"}


def parameter_type(value) -> str:
    """The KFP ``parameterType`` of a compiled value (a root parameter must have one)."""
    for kind, name in _KIND.items():
        if type(value) is kind:
            return name
    raise TypeError(f"no KFP parameter type for {value!r}")


def _constant(task: dict, name: str):
    source = task.get("inputs", {}).get("parameters", {}).get(name, {})
    return source.get("runtimeValue", {}).get("constant")


def add_runtime_parameters(spec: dict, config) -> dict:
    """Declare ``RUNTIME_PARAMETERS`` on the root of ``spec`` and wire them to the tasks (in place).

    ``data`` only when the pipeline's ExampleGen reads it (``--ingest example-gen``): prepared
    data is read at compile time. Returns ``spec``.
    """
    tasks, components = spec["root"]["dag"]["tasks"], spec["components"]
    declared: dict[str, dict] = {}
    for name in RUNTIME_PARAMETERS:
        if name == "data":
            users = [t for t, body in tasks.items() if isinstance(_constant(body, "input_base"), str)]
            if not users or not config.ingests_in_pipeline():
                continue
            default = _constant(tasks[users[0]], "input_base")
            for task_name in users:
                tasks[task_name]["inputs"]["parameters"]["input_base"] = {"componentInputParameter": name}
        else:
            default = getattr(config, name)
            users = [t for t, body in tasks.items() if _uses(body, name)]
            for task_name in users:
                body = tasks[task_name]
                body["inputs"]["parameters"][TASK_PREFIX + name] = {"componentInputParameter": name}
                component = components[body["componentRef"]["name"]]
                component.setdefault("inputDefinitions", {}).setdefault("parameters", {})[TASK_PREFIX + name] = {
                    "parameterType": parameter_type(default)}
        if users:
            declared[name] = {"parameterType": parameter_type(default), "defaultValue": default}
    if declared:
        spec["root"].setdefault("inputDefinitions", {}).setdefault("parameters", {}).update(declared)
    return typed_root_parameters(spec)


def _uses(task: dict, name: str) -> bool:
    if name in _TRAINING:
        text = _constant(task, "custom_config")
        return isinstance(text, str) and name in ((json.loads(text or "null") or {}).get("training") or {})
    if name in _GATE:
        text = _constant(task, "eval_config")
        return isinstance(text, str) and bool(_gates(json.loads(text)))
    return False


def typed_root_parameters(spec: dict) -> dict:
    """Give every root input parameter without a ``parameterType`` the type of its default (in place).

    What TFX's ``use_pipeline_spec_2_1=True`` writes for its own runtime parameters; without a
    type a run value is rejected ("has unspecified type") by the API server.
    """
    for name, declared in spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {}).items():
        if not declared.get("parameterType"):
            if "defaultValue" not in declared:
                raise KubeflowConfigError(
                    f"Root parameter {name!r} of the compiled pipeline has neither a type nor a default, so a "
                    "KFP 2.x server would reject a run that sets it ('has unspecified type'); give it a default.")
            declared["parameterType"] = parameter_type(declared["defaultValue"])
    return spec


def _gates(eval_config: dict) -> list[dict]:
    """The blessing gate's thresholds (models/common/evaluation.py overall_gate): value and change."""
    found = []
    for metrics_spec in eval_config.get("metrics_specs", []):
        for metric in metrics_spec.get("metrics", []):
            for per_slice in metric.get("per_slice_thresholds", []):
                threshold = per_slice.get("threshold", {})
                if "value_threshold" in threshold and "change_threshold" in threshold:
                    found.append(threshold)
    return found


def check_values(values: Mapping[str, Any]) -> dict:
    """``values`` checked as the run settings they are (PipelineConfig's own ranges); returns them."""
    from pipeline.config import PipelineConfig

    unknown = sorted(set(values) - set(RUNTIME_PARAMETERS))
    if unknown:
        raise KubeflowConfigError(f"{', '.join(unknown)}: not a runtime parameter of this project; a run can set "
                                  f"{', '.join(RUNTIME_PARAMETERS)}.")
    settings: dict[str, Any] = {k: v for k, v in values.items() if k != "data"}
    if "epochs" in settings:
        epochs = float(settings["epochs"])
        if not epochs.is_integer():
            raise KubeflowConfigError(f"epochs: a whole number of epochs, got {settings['epochs']}.")
        settings["epochs"] = int(epochs)
    for name in ("learning_rate", "min_accuracy", "max_regression", "gate_margin"):
        if name in settings:
            settings[name] = float(settings[name])
            if not math.isfinite(settings[name]):
                raise KubeflowConfigError(f"{name}: a finite number, got {settings[name]}.")
    PipelineConfig(output_dir="unused://", **settings)  # raises ConfigError with the setting's range
    return {**values, **settings}


def parse_assignments(spec: dict, assignments: Iterable[str]) -> dict:
    """``deploy --param NAME=VALUE``: values typed by the package's root parameters and checked."""
    declared = spec.get("root", {}).get("inputDefinitions", {}).get("parameters", {})
    values: dict = {}
    for text in assignments:
        name, sep, raw = text.partition("=")
        name = name.strip().replace("-", "_")
        if not sep or name not in declared:
            known = ", ".join(sorted(declared)) or "none (compiled before runtime parameters existed: compile again)"
            raise KubeflowConfigError(f"--param {text!r}: give NAME=VALUE with NAME a runtime parameter of this "
                                      f"package; it has: {known}.")
        kind = declared[name].get("parameterType")
        converters: dict[str, Callable[[str], Any]] = {
            "NUMBER_INTEGER": int, "NUMBER_DOUBLE": float, "STRING": str,
            "BOOLEAN": lambda v: {"true": True, "false": False}[v.lower()]}
        try:
            values[name] = converters[kind](raw.strip())
        except (KeyError, ValueError):
            raise KubeflowConfigError(f"--param {text!r}: {name} is a {kind} parameter; {raw!r} is not one.") from None
    check_values(values)
    return values


def apply_to_executor_input(executor_input: dict) -> dict:
    """Fold the ``runtime_<name>`` parameter values into the execution properties they set (in place).

    Run by the container entrypoint before TFX reads the ExecutorInput; returns what was applied.
    A value out of range (e.g. set in the KFP UI) stops the step with the setting's paragraph.
    """
    parameters = executor_input.get("inputs", {}).get("parameterValues", {})
    given = {key[len(TASK_PREFIX):]: parameters.pop(key) for key in list(parameters)
             if key.startswith(TASK_PREFIX) and key[len(TASK_PREFIX):] in RUNTIME_PARAMETERS}
    if not given:
        return {}
    values = check_values(given)
    training = [name for name in _TRAINING if name in values]
    if training and "custom_config" in parameters:
        custom_config = json.loads(parameters["custom_config"] or "null") or {}
        custom_config["training"] = {**(custom_config.get("training") or {}), **{n: values[n] for n in training}}
        parameters["custom_config"] = json.dumps(custom_config, sort_keys=True)
    if any(name in values for name in _GATE) and "eval_config" in parameters:
        eval_config = json.loads(parameters["eval_config"])
        for threshold in _gates(eval_config):
            if "min_accuracy" in values:
                threshold["value_threshold"]["lower_bound"] = values["min_accuracy"]  # a DoubleValue in JSON
            if "max_regression" in values:
                threshold["change_threshold"]["absolute"] = -values["max_regression"]
        parameters["eval_config"] = json.dumps(eval_config, sort_keys=True)
    return copy.deepcopy(values)

"""Pusher that publishes a blessed model to the TF Serving directory atomically.

TFX's Pusher copies into ``<base>/<version>/`` in place, ``saved_model.pb`` last
(tfx/components/pusher/executor.py:202-208@1.16.0): a crash mid-copy leaves a numbered
folder without it, which TF Serving's file-system source still picks as the newest version
and fails to load on every poll, and nothing else could be published with the model. This
one reuses TFX's blessing check and
model lookup, publishes through ``serving_dir.publish_version`` (stage, then rename),
and records the push (run, model, key metrics) in ``push_info.json`` beside the model,
which ``python -m pipeline models`` lists.

What goes beside the SavedModel is written into the staged folder before the rename, so it
is published with the version or not at all: TFLite models checked against the SavedModel
(components/tflite_export.py) when the family declares a conversion, and a model card
(components/model_card.py) that records them too. The family's
declarations arrive in ``custom_config`` (pipeline/graph.py); components import nothing of
``pipeline``.

Whatever the blessing says, a model is not pushed when a metric or a variable is not a
finite number, or its variables cannot be read (``artifacts/model_files.py``): the reason goes
on the PushedModel artifact (``not_pushed_reason``), where the run summary reads it.
"""
import datetime
import importlib
import json
import logging
import math
from typing import Any

from stackenv import compat

from tfx import types
from tfx.components.pusher import executor as pusher_executor
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import pusher_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import io_utils, proto_utils

from artifacts.serving_dir import publish_version

EVALUATION_KEY = "evaluation"
EXAMPLES_KEY = "examples"   # the ExampleGen's raw examples: TFLite's check and calibration data
TFLITE_KEY = "tflite"       # custom_config: {"spec": dotted path to a TfliteSpec} or {"note": why none}
MODEL_CARD_KEY = "model_card"  # custom_config: the family's and the run's declarations (components/model_card.py)
#: PushedModel custom property: why a blessed model was not pushed (read by pipeline/summary.py).
NOT_PUSHED_REASON = "not_pushed_reason"
PUSH_INCONCLUSIVE_KEY = "push_inconclusive"  # custom_config: push what the eval set cannot judge (--push-inconclusive)

log = logging.getLogger(__name__)


class AtomicPusherSpec(standard_component_specs.PusherSpec):
    INPUTS = {
        **standard_component_specs.PusherSpec.INPUTS,
        EVALUATION_KEY: ChannelParameter(type=standard_artifacts.ModelEvaluation, optional=True),
        EXAMPLES_KEY: ChannelParameter(type=standard_artifacts.Examples, optional=True),
    }


def inconclusive(evaluation_uri: str) -> bool:
    """The model failed only the key metric's value check on the overall slice, and by less than the
    noise of its eval set (models/common/intervals.py): the run's ``--push-inconclusive`` case."""
    from artifacts.tfma_results import failed_checks, overall_metrics
    from components.reference_gate import noise_free, read_gate
    from models.common import intervals

    gate = read_gate(evaluation_uri)
    if not gate or gate.get("threshold") is None or noise_free(gate):
        return False
    if failed_checks(evaluation_uri) != {(gate["metric"], False, "overall")}:
        return False  # another check failed too (a regression, a non-finite value): not a question of noise
    metrics = overall_metrics(evaluation_uri)
    value, count = metrics.get(gate["metric"]), metrics.get("example_count")
    if not isinstance(value, float) or not count:
        return False
    return intervals.outcome(value, count, gate["threshold"]) == intervals.INCONCLUSIVE


def _push_metrics(evaluation_uri: str) -> dict[str, Any]:
    """The candidate's overall metrics for push_info.json (empty if unreadable)."""
    from artifacts.tfma_results import overall_metrics  # TFMA loads only when a push needs it

    try:
        return overall_metrics(evaluation_uri)
    except Exception as error:  # noqa: BLE001 - metrics are informative, the push is what matters
        log.warning("Could not read metrics from %s: %s", evaluation_uri, error)
    return {}


def _tflite(settings: dict[str, Any], model_path: str, examples: list[types.Artifact], staging: str) -> dict[str, Any]:
    """TFLite models into the staged version; the record for push_info.json."""
    if not settings.get("spec"):
        return {"written": False, "why": settings.get("note") or "the model family declares no TFLite conversion"}
    if not examples:
        return {"written": False, "why": "the Pusher got no examples to check a TFLite model on"}
    from components.tflite_export import export_tflite  # TFLite's converter loads only when a push needs it

    module, _, name = settings["spec"].rpartition(".")  # a family's TfliteSpec, by dotted path
    spec = getattr(importlib.import_module(module), name)
    return export_tflite(spec, model_path, examples[0].uri, staging)


def non_finite_metrics(metrics: dict[str, Any]) -> list[str]:
    """Names of numeric metrics that are nan or +-inf (a diverged model's signature)."""
    def finite(value: Any) -> bool:
        try:  # TFMA stores nan/inf as the strings "NaN", "Infinity", "-Infinity"
            return math.isfinite(float(value))
        except (TypeError, ValueError):
            return True  # not a number: nothing to judge
    return sorted(name for name, value in metrics.items() if not finite(value))


def _refusal(metrics: dict[str, Any], model_path: str) -> str | None:
    """Why a blessed model must not be served, as one paragraph; None if it may be."""
    from artifacts.model_files import DamagedModel, non_finite_variables

    not_finite = non_finite_metrics(metrics)
    if not_finite:
        # TFMA compares nan against a threshold as "not below it": a nan metric would pass the gate.
        return (f"metrics {', '.join(not_finite)} are not finite numbers; the served model is unchanged. "
                "Training diverged: lower --learning-rate and run again.")
    try:
        bad = non_finite_variables(model_path)
    except DamagedModel as error:
        return f"{error.paragraph} The served model is unchanged."
    if bad:
        shown = ", ".join(bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return (f"the exported model {model_path} holds nan or infinite values in {len(bad)} variable(s) "
                f"({shown}), whatever its metrics say; the served model is unchanged. Training diverged: "
                "lower --learning-rate and run again.")
    return None


class Executor(pusher_executor.Executor):
    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        compat.log_executor_startup(self, input_dict, output_dict, exec_properties)
        pushed_model = artifact_utils.get_single_instance(output_dict[standard_component_specs.PUSHED_MODEL_KEY])
        evaluations = input_dict.get(EVALUATION_KEY) or []
        if not self.CheckBlessing(input_dict):
            settings = json.loads(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "{}")
            if not (settings.get(PUSH_INCONCLUSIVE_KEY) and evaluations and inconclusive(evaluations[0].uri)):
                log.info("Model not blessed: nothing pushed, the served model is unchanged.")
                compat.mark_not_pushed(self, pushed_model)
                return
            log.warning("Model not blessed, but its eval set is too small to tell it from the gate: pushed, as "
                        "--push-inconclusive asks.")
        metrics = _push_metrics(evaluations[0].uri) if evaluations else {}
        model_path = self.GetModelPath(input_dict)
        refusal = _refusal(metrics, model_path)
        if refusal:
            log.warning("Model blessed but not pushed: %s", refusal)
            compat.mark_not_pushed(self, pushed_model)
            pushed_model.set_string_custom_property(NOT_PUSHED_REASON, refusal)
            return
        destination = pusher_pb2.PushDestination()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.PUSH_DESTINATION_KEY], destination)
        model = artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY])
        push_info = {
            "pushed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "pipeline_run_id": compat.pipeline_run_id(self),
            "model_uri": model.uri,
            "metrics": metrics,
        }
        settings = json.loads(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null") or {}
        examples = input_dict.get(EXAMPLES_KEY) or []

        def beside_the_model(staging: str, version: int) -> dict[str, Any]:
            from components.data_facts import facts_of
            from components.model_card import build_card, write_model_card

            added = {TFLITE_KEY: _tflite(settings.get(TFLITE_KEY) or {}, model_path, examples, staging)}
            card = build_card(settings.get(MODEL_CARD_KEY) or {"family": "unknown"}, version, {**push_info, **added},
                              model_path, evaluations[0].uri if evaluations else None,
                              facts_of(examples[0]) if examples else None)
            write_model_card(staging, card)
            return added

        version_dir = publish_version(model_path, destination.filesystem.base_directory, push_info,
                                      copy_dir=io_utils.copy_dir, add_files=beside_the_model)
        io_utils.copy_dir(model_path, pushed_model.uri)  # archive copy, as TFX's Pusher keeps
        compat.mark_pushed(self, pushed_model, version_dir, version_dir.rstrip("/").rsplit("/", 1)[-1])
        log.info("Model pushed to %s", version_dir)


class AtomicPusher(base_component.BaseComponent):
    """Pusher with an atomic publish; optional ``evaluation`` input feeds push_info.json, optional
    ``examples`` (raw, the ExampleGen's) the TFLite check; ``custom_config``: the family's declarations."""

    SPEC_CLASS = AtomicPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, model: types.BaseChannel, model_blessing: types.BaseChannel,
                 base_directory: str, evaluation: types.BaseChannel = None, examples: types.BaseChannel = None,
                 custom_config: dict[str, Any] | None = None):
        super().__init__(spec=AtomicPusherSpec(
            model=model,
            model_blessing=model_blessing,
            evaluation=evaluation,
            examples=examples,
            custom_config=json.dumps(custom_config, sort_keys=True) if custom_config else None,
            push_destination=pusher_pb2.PushDestination(
                filesystem=pusher_pb2.PushDestination.Filesystem(base_directory=base_directory)),
            pushed_model=types.Channel(type=standard_artifacts.PushedModel),
        ))

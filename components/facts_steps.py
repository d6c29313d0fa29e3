"""Transform and Trainer that fill their data-dependent settings from the ExampleGen's facts.

Why: a graph compiled without reading the data (``compile --data gs://...``) cannot know
the class list, the image shape or how many steps an epoch is; the ExampleGen computes
them (``components/data_facts.py``) and these executors fill the slots the graph left
empty before TFX's own executors run. Transform passes the facts on in its graph output,
the Trainer's only view of the data. With data prepared beforehand (ImportExampleGen) there
are no facts and both run exactly as TFX's.
"""
from __future__ import annotations

import json
from typing import Any

from tfx.components import Trainer, Transform
from tfx.components.trainer import executor as trainer_executor
from tfx.components.transform import executor as transform_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.data_facts import fill_custom_config, read_facts, steps, write_facts

_CUSTOM_CONFIG = standard_component_specs.CUSTOM_CONFIG_KEY


def _filled(exec_properties: dict[str, Any], facts: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(exec_properties.get(_CUSTOM_CONFIG) or "null") or {}
    return {**exec_properties, _CUSTOM_CONFIG: json.dumps(fill_custom_config(config, facts))}


class FactsTransformExecutor(transform_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        examples = artifact_utils.get_single_instance(input_dict[standard_component_specs.EXAMPLES_KEY])
        facts = read_facts(examples.uri)
        if facts is None:
            return super().Do(input_dict, output_dict, exec_properties)
        super().Do(input_dict, output_dict, _filled(exec_properties, facts))
        graph = artifact_utils.get_single_instance(output_dict[standard_component_specs.TRANSFORM_GRAPH_KEY])
        write_facts(graph.uri, facts)


def with_graph_facts(input_dict, exec_properties: dict[str, Any]) -> tuple[dict[str, Any], dict | None]:
    """``exec_properties`` with the custom config filled from the facts Transform passed on in
    its graph output (the Trainer's and the Tuner's only view of the data), and those facts."""
    graphs = input_dict.get(standard_component_specs.TRANSFORM_GRAPH_KEY) or []
    facts = read_facts(graphs[0].uri) if graphs else None
    return (exec_properties if facts is None else _filled(exec_properties, facts)), facts


class FactsTrainerExecutor(trainer_executor.GenericExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        exec_properties, facts = with_graph_facts(input_dict, exec_properties)
        if facts is None:
            return super().Do(input_dict, output_dict, exec_properties)
        training = (json.loads(exec_properties[_CUSTOM_CONFIG]) or {}).get("training") or {}
        counts = facts.get("split_counts") or {}
        batch = int(training.get("batch_size") or 1)
        for key, split, epochs in ((standard_component_specs.TRAIN_ARGS_KEY, "train", int(training.get("epochs") or 1)),
                                   (standard_component_specs.EVAL_ARGS_KEY, "eval", 1)):
            args = trainer_pb2.TrainArgs() if key == standard_component_specs.TRAIN_ARGS_KEY else trainer_pb2.EvalArgs()
            proto_utils.json_to_proto(exec_properties.get(key) or "{}", args)
            args.num_steps = steps(args.num_steps, int(counts.get(split, 0)), batch, epochs)
            exec_properties[key] = proto_utils.proto_to_json(args)
        super().Do(input_dict, output_dict, exec_properties)


class FactsTransform(Transform):
    """TFX's Transform; class list etc. filled from the ExampleGen's facts when it wrote some."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(FactsTransformExecutor)


class FactsTrainer(Trainer):
    """TFX's Trainer; image shape and step budgets filled from the facts when the graph left them empty."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(FactsTrainerExecutor)

"""Transform and Trainer that hand the model code the data's facts, read from artifact properties.

Why: a graph compiled without reading the data (``compile --data gs://...``) cannot know the
class list, the image shape or how many steps an epoch is; the ExampleGen records them as
properties of its Examples artifact (``components/data_facts.py``). Transform reads them
from its input and records them on its outputs, the Trainer's and the Tuner's only view of
the data; each hands them to the model code under ``custom_config["data_facts"]`` and the
Trainer decides a step budget the graph left at 0 from the split counts. With data prepared
beforehand (ImportExampleGen) the artifacts carry no facts: the graph put the manifest's
under the same key, and both steps run exactly as TFX's.
"""
from __future__ import annotations

import json
from typing import Any

from stackenv import compat

from tfx.components import Trainer, Transform
from tfx.components.trainer import executor as trainer_executor
from tfx.components.transform import executor as transform_executor
from tfx.dsl.components.base import executor_spec
from tfx.proto import trainer_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.data_facts import facts_of, publish, steps, with_facts
from components.gzip_records import write_gzip_tfrecords

_CUSTOM_CONFIG = standard_component_specs.CUSTOM_CONFIG_KEY
_PASSED_ON = (standard_component_specs.TRANSFORM_GRAPH_KEY, standard_component_specs.TRANSFORMED_EXAMPLES_KEY)


def with_facts_handed_over(exec_properties: dict[str, Any], facts: dict[str, Any] | None) -> dict[str, Any]:
    """``exec_properties`` whose custom config holds ``facts`` under ``data_facts``."""
    if not facts:
        return exec_properties
    config = json.loads(exec_properties.get(_CUSTOM_CONFIG) or "null") or {}
    return {**exec_properties, _CUSTOM_CONFIG: json.dumps(with_facts(config, facts))}


class FactsTransformExecutor(transform_executor.Executor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        facts = facts_of(artifact_utils.get_single_instance(input_dict[standard_component_specs.EXAMPLES_KEY]))
        # The transformed pixels are most of what Transform writes: deflated faster (gzip_records.py).
        with compat.transform_writes_with(write_gzip_tfrecords):
            super().Do(input_dict, output_dict, with_facts_handed_over(exec_properties, facts))
        if facts:
            for key in _PASSED_ON:
                for artifact in output_dict.get(key) or []:
                    publish(artifact, facts)


def with_graph_facts(input_dict, exec_properties: dict[str, Any]) -> tuple[dict[str, Any], dict | None]:
    """``exec_properties`` with the facts Transform recorded on its graph output (the Trainer's
    and the Tuner's only view of the data) handed over, and those facts."""
    graphs = input_dict.get(standard_component_specs.TRANSFORM_GRAPH_KEY) or []
    facts = facts_of(graphs[0]) if graphs else None
    return with_facts_handed_over(exec_properties, facts), facts


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
    """TFX's Transform; the data's facts handed to ``preprocessing_fn`` and recorded on its outputs."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(FactsTransformExecutor)


class FactsTrainer(Trainer):
    """TFX's Trainer; the data's facts handed to ``run_fn``, step budgets left at 0 decided from them."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(FactsTrainerExecutor)

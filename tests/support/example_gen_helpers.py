"""Run an ExampleGen executor the way TFX does (real Beam, real artifacts), read its splits back."""
from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf
from tfx.components.example_gen import utils
from tfx.components.example_gen.import_example_gen.executor import Executor as ImportExecutor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.utils import proto_utils

#: The facts each run recorded on its Examples artifact (components/data_facts.py), by output directory.
_RECORDED: dict[str, dict | None] = {}

TRAIN_EVAL = example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
    splits=[example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=4),
            example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=1)],
    partition_feature_name="example_id"))


def run_example_gen(executor_cls, input_base: str, out_dir: Path, *, pattern: str = "*",
                    output_config: example_gen_pb2.Output | None = TRAIN_EVAL,
                    input_config: example_gen_pb2.Input | None = None,
                    custom_config: example_gen_pb2.CustomConfig | None = None) -> dict[str, list[bytes]]:
    """``{split: sorted serialized examples}`` written by ``executor_cls`` for this input."""
    input_config = input_config or example_gen_pb2.Input(
        splits=[example_gen_pb2.Input.Split(name="single_split", pattern=pattern)])
    output_config = output_config or utils.make_default_output_config(input_config)
    examples = standard_artifacts.Examples()
    examples.uri = str(out_dir)
    exec_properties = {
        standard_component_specs.INPUT_BASE_KEY: input_base,
        standard_component_specs.INPUT_CONFIG_KEY: proto_utils.proto_to_json(input_config),
        standard_component_specs.OUTPUT_CONFIG_KEY: proto_utils.proto_to_json(output_config),
        standard_component_specs.OUTPUT_DATA_FORMAT_KEY: example_gen_pb2.FORMAT_TF_EXAMPLE,
        standard_component_specs.OUTPUT_FILE_FORMAT_KEY: example_gen_pb2.FORMAT_TFRECORDS_GZIP,
    }
    if custom_config is not None:
        exec_properties[standard_component_specs.CUSTOM_CONFIG_KEY] = proto_utils.proto_to_json(custom_config)
    executor_cls().Do({}, {standard_component_specs.EXAMPLES_KEY: [examples]}, exec_properties)
    from components.data_facts import facts_of

    _RECORDED[str(out_dir)] = facts_of(examples)
    out = {}
    for split in artifact_utils.decode_split_names(examples.split_names):
        files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
        out[split] = sorted(r.numpy() for r in tf.data.TFRecordDataset(files, compression_type="GZIP"))
    return out


def recorded_facts(out_dir: str | Path) -> dict:
    """The data facts the last :func:`run_example_gen` into ``out_dir`` recorded on its artifact."""
    facts = _RECORDED.get(str(out_dir))
    assert facts is not None, f"no data facts recorded on the Examples written to {out_dir}"
    return facts


def run_import_example_gen(examples_dir: str, pattern: str, out_dir: Path, **kwargs) -> dict[str, list[bytes]]:
    """What today's pipeline reads: TFX's ImportExampleGen over the prepared TFRecords."""
    return run_example_gen(ImportExecutor, examples_dir, out_dir, pattern=pattern, **kwargs)

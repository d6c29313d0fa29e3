"""The base of this project's ExampleGen executors: splits written as they are made.

Why not TFX's own write: its ``WriteSplit`` reshuffles every split before writing it
(``tfx/components/example_gen/write_split.py``). On Beam's DirectRunner, in_memory and
multi_processing alike, a shuffle holds its whole input in the runner process, and it
does not even reorder there (the runner emits a reshuffle's elements in arrival order).
So the ExampleGen's memory grew with the data set: a buffered copy of every serialized
example (benchmarks/README.md, "Ingestion inside the pipeline"). Our sources already
spread their units over the workers before converting them, and the image source lists
its files in a seeded random order, so writing straight after the conversion loses
nothing and streams the examples to disk on every runner.

``Do`` is TFX's (split names, payload and file format properties, ``_make_beam_pipeline``)
with this write in place of ``WriteSplit``.
"""
from __future__ import annotations

import os
import zlib

import apache_beam as beam
from tfx.components.example_gen import utils, write_split
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.components.util import examples_utils
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.data_facts import publish_staged, with_facts_uri
from components.gzip_records import write_gzip_tfrecords


@beam.ptransform_fn
def _WriteSplitStreaming(examples: beam.pvalue.PCollection, split_uri: str,  # noqa: N802
                         files: int = 1) -> beam.pvalue.PDone | tuple:
    """TFX's WriteSplit for TFRecords (same records, same counter), without its Reshuffle, deflated faster
    (``gzip_records.py``); ``files`` > 1 spreads the records over that many files by their checksum."""
    records = examples | "MaybeSerialize" >> beam.ParDo(write_split.MaybeSerialize())
    prefix = os.path.join(split_uri, write_split.DEFAULT_TF_RECORD_FILE_NAME)
    if files == 1:
        return records | "Write" >> write_gzip_tfrecords(prefix)
    parts = records | "SpreadOverFiles" >> beam.Partition(lambda record, n: zlib.crc32(record) % n, files)
    return tuple(part | f"Write[{i}]" >> write_gzip_tfrecords(f"{prefix}-part{i}") for i, part in enumerate(parts))


class StreamingExampleGenExecutor(BaseExampleGenExecutor):
    """Subclasses build their splits in TFX's hook ``GenerateExamplesByBeam`` (default: TFX's
    hash split of ``GetInputSourceToExamplePTransform``); ``Do`` writes them as they come.

    ``FILES_PER_SPLIT``: Beam's in_memory runner writes one file per split (one bundle), and reads
    a split in parallel (``--direct_num_workers``) only file by file, so a subclass whose records
    have no order to keep writes several (pipeline/config.py: ``component_beam_args``)."""

    FILES_PER_SPLIT = 1

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        """TFX's ``BaseExampleGenExecutor.Do`` (tfx 1.16), writing with :func:`_WriteSplitStreaming`."""
        self._log_startup(input_dict, output_dict, exec_properties)
        exec_properties = with_facts_uri(output_dict, exec_properties)
        input_config, output_config = example_gen_pb2.Input(), example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config)
        proto_utils.json_to_proto(exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config)
        outputs = output_dict[standard_component_specs.EXAMPLES_KEY]
        examples = artifact_utils.get_single_instance(outputs)
        examples.split_names = artifact_utils.encode_split_names(
            utils.generate_output_split_names(input_config, output_config))
        with self._make_beam_pipeline() as pipeline:
            for name, split in self.GenerateExamplesByBeam(pipeline, exec_properties).items():
                _ = split | f"WriteSplit[{name}]" >> _WriteSplitStreaming(artifact_utils.get_split_uri(outputs, name),
                                                                           self.FILES_PER_SPLIT)
        payload_format = exec_properties.get(standard_component_specs.OUTPUT_DATA_FORMAT_KEY)
        if payload_format:
            examples_utils.set_payload_format(examples, payload_format)
        file_format = exec_properties.get(standard_component_specs.OUTPUT_FILE_FORMAT_KEY)
        if file_format:
            examples_utils.set_file_format(examples, write_split.to_file_format_str(file_format))
        publish_staged(examples)


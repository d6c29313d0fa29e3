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

TFX's ``Do`` (split names, payload and file format properties) stays in charge; only the
write moves into ``GenerateExamplesByBeam``, which then hands ``Do`` nothing left to write.
"""
from __future__ import annotations

import os
from typing import Any

import apache_beam as beam
from tfx.components.example_gen import write_split
from tfx.components.example_gen.base_example_gen_executor import BaseExampleGenExecutor
from tfx.types import artifact_utils, standard_component_specs

from components.data_facts import publish_staged, with_facts_uri


@beam.ptransform_fn
def _WriteSplitStreaming(examples: beam.pvalue.PCollection, split_uri: str) -> beam.pvalue.PDone:  # noqa: N802
    """TFX's WriteSplit for TFRecords (same files, same counter), without its Reshuffle."""
    return (examples
            | "MaybeSerialize" >> beam.ParDo(write_split.MaybeSerialize())
            | "Write" >> beam.io.WriteToTFRecord(os.path.join(split_uri, write_split.DEFAULT_TF_RECORD_FILE_NAME),
                                                 file_name_suffix=".gz"))


class StreamingExampleGenExecutor(BaseExampleGenExecutor):
    """Subclasses build their splits in ``SplitsByBeam`` (default: TFX's hash split of
    ``GetInputSourceToExamplePTransform``); this class writes them."""

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        self._output_examples = output_dict[standard_component_specs.EXAMPLES_KEY]
        super().Do(input_dict, output_dict, with_facts_uri(output_dict, exec_properties))
        publish_staged(artifact_utils.get_single_instance(self._output_examples))

    def SplitsByBeam(self, pipeline: beam.Pipeline,  # noqa: N802 (named like TFX's hooks)
                     exec_properties: dict[str, Any]) -> dict[str, beam.pvalue.PCollection]:
        return super().GenerateExamplesByBeam(pipeline, exec_properties)

    def GenerateExamplesByBeam(self, pipeline, exec_properties):  # noqa: N802 (TFX's name)
        for name, examples in self.SplitsByBeam(pipeline, exec_properties).items():
            _ = examples | f"WriteSplit[{name}]" >> _WriteSplitStreaming(
                artifact_utils.get_split_uri(self._output_examples, name))
        return {}

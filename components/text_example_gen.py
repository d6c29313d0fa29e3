"""ExampleGen for text sources (a text file, a folder of documents, the bundled pydoc corpus).

Why not ExampleGen's hash split: windows of one text overlap, so the split is decided
from the whole corpus (``data/text_split.py``). The executor therefore overrides
``GenerateExamplesByBeam``: a first pass counts each document's windows, a combiner
decides the split, a second pass writes each window into its split (gap windows
dropped), exactly as the prepare step did. Files that yield no window are counted and
named in the facts (``corpus``, a property of the Examples artifact), as the prepare step records them in
its manifest. The input config has the two splits with the
same pattern, so TFX's driver fingerprints (and span-resolves) the source for both.
"""
from __future__ import annotations

from typing import Any

import apache_beam as beam
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import standard_component_specs
from tfx.utils import proto_utils

from components.data_facts import attach_facts
from components.ingest_config import read_settings, source_root
from components.ingest_driver import TreeFingerprintDriver
from components.streaming_write import StreamingExampleGenExecutor
from data import text, text_split
from data.text_ingest import count, decide_split, list_documents, split_windows

SPLITS = (text_split.TRAIN, text_split.EVAL)


def input_config(pattern: str) -> example_gen_pb2.Input:
    """Both splits read the same source; the executor decides which window goes where."""
    return example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name=name, pattern=pattern)
                                         for name in SPLITS])


def _max_text_mb(exec_properties: dict[str, Any]) -> int | None:
    """The corpus budget (``--max-text-mb``), None in a graph compiled before it existed."""
    value = read_settings(exec_properties).get("max_text_mb")
    return int(value) if value else None


def _settings(exec_properties: dict[str, Any]) -> dict[str, int]:
    values = read_settings(exec_properties)
    return {"context_words": int(values.get("context_words", text.DEFAULT_CONTEXT_WORDS)),
            "target_words": int(values.get("target_words", text.DEFAULT_TARGET_WORDS)),
            "stride": int(values.get("stride", text.DEFAULT_STRIDE))}


class TextExampleGenExecutor(StreamingExampleGenExecutor):
    """Reads a text source through ``tf.io.gfile`` with Beam; the corpus decides the split."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802 (TFX's name)
        raise NotImplementedError("the split is decided in GenerateExamplesByBeam")

    def GenerateExamplesByBeam(self, pipeline: beam.Pipeline,  # noqa: N802 (TFX's hook)
                     exec_properties: dict[str, Any]) -> dict[str, beam.pvalue.PCollection]:
        config = example_gen_pb2.Input()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], config)
        root = source_root(exec_properties[standard_component_specs.INPUT_BASE_KEY], config.splits[0].pattern)
        settings, budget = _settings(exec_properties), _max_text_mb(exec_properties)
        refs, listed_skips = list_documents(root, bool(read_settings(exec_properties).get("follow_links")))
        documents = pipeline | "Documents" >> beam.Create(refs) | "Spread" >> beam.Reshuffle()
        decided = (documents | "CountWindows" >> beam.Map(count, settings, budget, len(refs))
                   | "AllCounts" >> beam.combiners.ToList()
                   | "DecideSplit" >> beam.Map(decide_split, listed_skips, settings, f"text source {root}", budget))
        split = decided | "Split" >> beam.Map(lambda pair: pair[0])
        windows = documents | "Windows" >> beam.FlatMap(split_windows, settings, beam.pvalue.AsSingleton(split))
        parts = windows | "BySplit" >> beam.Partition(lambda item, _: SPLITS.index(item[0]), len(SPLITS))
        splits = {name: parts[i] | f"Example[{name}]" >> beam.Map(lambda item: item[1])
                  for i, name in enumerate(SPLITS)}
        attach_facts(splits, exec_properties, decided | "TextFacts" >> beam.Map(
            lambda pair: {"kind": "text", "split": pair[0].to_json(), "stride": settings["stride"],
                          "corpus": pair[1].to_json()}))
        return splits


class TextExampleGen(FileBasedExampleGen):
    """FileBasedExampleGen (driver: fingerprint and spans) with the text executor."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(TextExampleGenExecutor)
    DRIVER_CLASS = TreeFingerprintDriver


def text_example_gen(data: str | None, *, context_words: int, target_words: int,
                     span_pattern: str | None = None, spans: tuple[int, int] | None = None,
                     max_text_mb: int | None = None, follow_links: bool = False) -> TextExampleGen:
    """The ExampleGen for ``--data``, built from the string alone (compile reads no data).

    Args:
        data: a text file or a folder of documents, on any tf.io.gfile filesystem; None: the
            bundled pydoc corpus.
        context_words, target_words: the words before and the words to continue of each window.
        span_pattern, spans: a ``{SPAN}`` folder pattern and the span range to read.
        max_text_mb: refuse a corpus larger than this.
        follow_links: read symbolic links inside the folder.
    """
    from components.ingest_config import input_layout, range_config, settings_config
    from data.text_ingest import BUNDLED_TOPICS

    base, pattern = input_layout(data or BUNDLED_TOPICS, span_pattern)
    return TextExampleGen(
        input_base=base,
        input_config=input_config(pattern),
        custom_config=settings_config(context_words=context_words, target_words=target_words,
                                      max_text_mb=max_text_mb, follow_links=follow_links or None),
        range_config=range_config(spans),
    )

"""ExampleGen for image sources (class folders, CIFAR-10 batches, TFRecords, bundled digits).

Why a custom ExampleGen instead of preparing TFRecords before the pipeline: the data is
read where the pipeline runs (any Beam runner, any ``tf.io.gfile`` URI), ``compile``
never touches it, and TFX's FileBasedDriver fingerprints the input (names, sizes, mtimes)
and resolves ``{SPAN}``, so an unchanged folder is a cache hit.

Two passes over the units (files or batches, grouped in tasks) keep the pixels out of
memory at any size, and each file is read and decoded once: the first pass decodes each
image, parks the pixels in block files (``pixel_blocks.py``) and hands on only each
block's facts (image means and classes: the brightness tertiles and, for TFRecords, the
class list are whole-data facts, one Beam combiner; unreadable files, all listed in one
error before any example is written); the second reads the blocks back and writes the
examples (``streaming_write.py``: nothing buffers the examples before the write). The task list travels through a file
in the output directory (``.tasks/tasks.jsonl``, removed after the run), not inside the
Beam graph: a ``Create`` of a million file names is decoded by every multi_processing
worker and would exceed a Dataflow job graph's size limit; the graph carries only each
task's byte range in that file. What grows with the data is the listing the executor
makes (benchmarks/README.md, "1,000,000 files"). Examples are identical to the prepare
step's (``data.images.writer``), and the train/eval split is ExampleGen's hash on
``example_id`` as before.
"""
from __future__ import annotations

import array
import dataclasses
import json
import os
import random
from typing import Any

from stackenv import progress

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.types import standard_component_specs

from components.data_facts import FACTS_EXTRA_KEY, attach_facts
from components.ingest_config import read_settings, source_root
from components.ingest_driver import TreeFingerprintDriver
from components.pixel_blocks import Block, read_block, write_block
from components.streaming_write import StreamingExampleGenExecutor
from data.errors import DataError
from data.images.sources import BUNDLED_DIGITS, Listing, Unit, list_source, read_unit
from data.images.writer import brightness_bucket, brightness_thresholds, make_example

#: Image files read by one task. Files are small: one element per file would cost the
#: runner more per element (its buffers hold every element of a shuffle) than the file
#: itself. Batches and TFRecord files are big: one per task.
FILES_PER_TASK = 256
#: Decoded images per block file (``pixel_blocks.py``): bounds a task's memory for a CIFAR
#: batch or a large TFRecord file (4,096 images of 32x32x3: 12 MiB).
IMAGES_PER_BLOCK = 4096
#: The counters of the runner's live progress line (``stackenv/progress.py``).
IMAGES_DECODED, EXAMPLES_MADE = "images decoded", "examples made"
#: Unreadable files named in the error (all are counted).
BAD_FILES_SHOWN = 20
#: exec_properties key (set by the executor, never by a user): the task list file.
TASKS_FILE_KEY = "_image_tasks_file"


def _tasks(listing: Listing) -> list[tuple[Unit, ...]]:
    """The units in a seeded random order, grouped into tasks. Random: a folder lists its
    files class by class, and that order is the order written (no runner shuffle before
    the write, see ``components/streaming_write.py``), so a reader with a bounded shuffle
    buffer would otherwise see one class at a time. Seeded: the same folder is written
    in the same order."""
    mixed = list(listing.units)
    random.Random(0).shuffle(mixed)
    size = FILES_PER_TASK if listing.kind == "folder" else 1
    return [tuple(mixed[i:i + size]) for i in range(0, len(mixed), size)]


def _write_tasks(tasks: list[tuple[Unit, ...]], path: str) -> list[tuple[int, int]]:
    """One JSON line per task in ``path`` (any ``tf.io.gfile`` URI); its (offset, length) in the file."""
    spans, offset = [], 0
    with tf.io.gfile.GFile(path, "wb") as out:
        for task in tasks:
            line = (json.dumps([dataclasses.astuple(unit) for unit in task]) + "\n").encode()
            out.write(line)
            spans.append((offset, len(line)))
            offset += len(line)
    return spans


def _read_task(span: tuple[int, int], path: str) -> tuple[Unit, ...]:
    with tf.io.gfile.GFile(path, "rb") as tasks:
        tasks.seek(span[0])
        return tuple(Unit(*fields) for fields in json.loads(tasks.read(span[1])))


@dataclasses.dataclass
class _BlockFacts:
    path: str
    means: np.ndarray
    classes: list[str]
    bad: list[tuple[str, str]]   # (file, why it cannot be read)
    count: int


def _decode(span: tuple[int, int], tasks_file: str, listing: Listing, blocks_dir: str, files: int | None):
    """First pass: read and decode each image of a task once, park the pixels in block files
    (``pixel_blocks.py``), and yield each block's path with its facts (means, classes, files
    that cannot be read). A bad image file does not stop the pass: every one is listed."""
    pixels: list[np.ndarray] = []
    labels: list[str] = []
    ids: list[str] = []
    bad: list[tuple[str, str]] = []
    name = 0

    def flush():
        nonlocal pixels, labels, ids, bad, name
        block = Block(np.stack(pixels) if pixels else np.empty((0, *listing.shape), np.uint8), labels, ids)
        path = f"{blocks_dir}/{span[0]}-{name}.npz"
        write_block(path, block)
        facts = _BlockFacts(path, block.means(), sorted(set(labels)), bad, len(labels))
        progress.count(IMAGES_DECODED, len(labels) + len(bad), total=files)  # the runner's live line
        pixels, labels, ids, bad, name = [], [], [], [], name + 1
        return facts

    for unit in _read_task(span, tasks_file):
        try:
            for image, label, example_id in read_unit(unit, listing):
                pixels.append(image)
                labels.append(label)
                ids.append(example_id)
                if len(pixels) == IMAGES_PER_BLOCK:
                    yield flush()
        except DataError as exc:
            if unit.kind != "folder":  # a CIFAR batch or TFRecord file: the whole source is suspect
                raise
            cause = exc.__cause__
            bad.append((unit.uri, f"{type(cause).__name__}: {cause}" if cause else str(exc)))
    yield flush()


class _Facts(beam.CombineFn):
    """The whole-data facts of all blocks: exact tertiles of the image means (8 bytes per
    image: small even for millions), the classes seen, the unreadable files (the first
    ``BAD_FILES_SHOWN`` by name, and their number)."""

    def create_accumulator(self):
        return array.array("d"), set(), [], 0

    def add_input(self, acc, block: _BlockFacts):
        means, classes, bad, bad_count = acc
        means.extend(block.means)
        classes.update(block.classes)
        return means, classes, sorted(bad + block.bad)[:BAD_FILES_SHOWN], bad_count + len(block.bad)

    def merge_accumulators(self, accs):
        merged = self.create_accumulator()
        for means, classes, bad, bad_count in accs:
            merged = (merged[0], merged[1], sorted(merged[2] + bad)[:BAD_FILES_SHOWN], merged[3] + bad_count)
            merged[0].extend(means)
            merged[1].update(classes)
        return merged

    def extract_output(self, acc):
        means, classes, bad, bad_count = acc
        thresholds = brightness_thresholds(np.asarray(means, dtype=np.float64)) if means else [0.0, 0.0]
        return {"thresholds": thresholds, "classes": sorted(classes), "bad": bad, "bad_count": bad_count,
                "images": len(means)}


def _checked(facts: dict[str, Any], root: str) -> dict[str, Any]:
    """The facts, once no file is unreadable: DataError listing them otherwise (before any example is written)."""
    if facts["bad_count"]:
        shown = "; ".join(f"{path} ({why})" for path, why in facts["bad"])
        more = facts["bad_count"] - len(facts["bad"])
        raise DataError(
            f"{facts['bad_count']:,} image file(s) in {root} cannot be read, so no example was written: "
            f"{shown}{f'; and {more:,} more' if more else ''}. Each is not a valid image or is truncated "
            "(e.g. an interrupted copy). Replace them with good copies, or delete them from their class folders."
        )
    return facts


def _classes(labels: list[str], root: str) -> list[str]:
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise DataError(
            f"The TFRecord files in {root} have only one class ('{classes[0] if classes else ''}'), but a "
            "classifier needs at least two. Add examples of the other classes."
        )
    return classes


def _examples(path: str, facts: dict[str, Any], classes: list[str]):
    """Second pass: the examples of one block, from its parked pixels (no file decoded again)."""
    block = read_block(path)
    thresholds = facts["thresholds"]
    progress.count(EXAMPLES_MADE, len(block.labels), total=facts["images"])
    index = {name: i for i, name in enumerate(classes)}
    for pixels, mean, label, example_id in zip(block.pixels, block.means(), block.labels, block.ids):
        yield make_example(pixels, label, index[label], brightness_bucket(mean, thresholds), example_id)


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
def _ImagesToExamples(pipeline: beam.Pipeline, exec_properties: dict[str, Any],  # noqa: N802 (Beam's style)
                      split_pattern: str) -> beam.pvalue.PCollection:
    settings = read_settings(exec_properties)
    root = source_root(exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
    listing = list_source(root, settings.get("image_size"), settings.get("channels"),
                          bool(settings.get("follow_links")))
    tasks_file = exec_properties[TASKS_FILE_KEY]
    blocks_dir = tasks_file.rsplit("/", 1)[0] + "/blocks"
    tf.io.gfile.makedirs(blocks_dir)
    # The tasks are read from the file, so only byte ranges travel through the graph.
    tasks = (pipeline | "Tasks" >> beam.Create(_write_tasks(_tasks(listing), tasks_file), reshuffle=False)
             | "Spread" >> beam.Reshuffle())  # parallel reads: tasks spread over the workers
    files = len(listing.units) if listing.kind == "folder" else None
    listing = dataclasses.replace(listing, units=())  # what the readers need, without a copy of every unit
    blocks = tasks | "Decode" >> beam.FlatMap(_decode, tasks_file, listing, blocks_dir, files)
    facts = (blocks | "Facts" >> beam.CombineGlobally(_Facts())
             | "CheckFiles" >> beam.Map(_checked, listing.root))
    if listing.classes is not None:
        classes = pipeline | "KnownClasses" >> beam.Create([list(listing.classes)])
    else:
        classes = facts | "CheckClasses" >> beam.Map(lambda f: _classes(f["classes"], listing.root))
    exec_properties[FACTS_EXTRA_KEY] = classes | "ImageFacts" >> beam.Map(
        lambda names: {"kind": "image", "classes": names, "image_shape": list(listing.shape),
                       **({"unused": listing.unused} if listing.unused else {})})
    return (blocks | "BlockPaths" >> beam.Map(lambda block: block.path)
            | "ToExamples" >> beam.FlatMap(_examples, beam.pvalue.AsSingleton(facts),
                                           beam.pvalue.AsSingleton(classes)))


class ImageExampleGenExecutor(StreamingExampleGenExecutor):
    """Reads an image source through ``tf.io.gfile`` with Beam; split as configured."""

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802 (TFX's name)
        return _ImagesToExamples

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        # In the output directory, where every worker of a distributed runner can read it;
        # removed once the examples are written (a failed run's output is not used).
        scratch = os.path.join(output_dict[standard_component_specs.EXAMPLES_KEY][0].uri, ".tasks")
        tf.io.gfile.makedirs(scratch)
        try:
            super().Do(input_dict, output_dict,
                       {**exec_properties, TASKS_FILE_KEY: os.path.join(scratch, "tasks.jsonl")})
        finally:
            tf.io.gfile.rmtree(scratch)

    def SplitsByBeam(self, pipeline, exec_properties):  # noqa: N802 (the base's hook)
        splits = super().SplitsByBeam(pipeline, exec_properties)
        attach_facts(splits, exec_properties, exec_properties.pop(FACTS_EXTRA_KEY))
        return splits


class ImageExampleGen(FileBasedExampleGen):
    """FileBasedExampleGen (driver: fingerprint and spans) with the image executor."""

    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(ImageExampleGenExecutor)
    DRIVER_CLASS = TreeFingerprintDriver


def image_example_gen(data: str | None, *, image_size: int | None, channels: int | None,
                      train_buckets: int, eval_buckets: int, split_feature: str,
                      span_pattern: str | None = None, spans: tuple[int, int] | None = None,
                      follow_links: bool = False) -> ImageExampleGen:
    """The ExampleGen for ``--data``, built from the string alone (compile reads no data).

    Args:
        data: a folder of class sub-folders, a CIFAR-10 folder or TFRecords, on any tf.io.gfile
            filesystem; None: the bundled digits.
        image_size, channels: the examples' shape (None: the source's; folders ``folder.default_shape``).
        train_buckets, eval_buckets: the hash split's proportions, on ``split_feature``.
        span_pattern, spans: a ``{SPAN}`` folder pattern and the span range to read.
        follow_links: read symbolic links inside the folder.
    """
    from tfx.proto import example_gen_pb2

    from components.ingest_config import input_layout, range_config, settings_config

    base, pattern = input_layout(data or BUNDLED_DIGITS, span_pattern)
    return ImageExampleGen(
        input_base=base,
        input_config=example_gen_pb2.Input(splits=[example_gen_pb2.Input.Split(name="all", pattern=pattern)]),
        output_config=example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
            splits=[example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=train_buckets),
                    example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=eval_buckets)],
            # A stable id, so an example stays in its split when other features change.
            partition_feature_name=split_feature)),
        custom_config=settings_config(image_size=image_size, channels=channels, follow_links=follow_links or None),
        range_config=range_config(spans),
    )

"""ExampleGen for image sources (class folders, CIFAR-10 batches, TFRecords, bundled digits).

Why a custom ExampleGen instead of preparing TFRecords before the pipeline: the data is
read where the pipeline runs (any Beam runner, any ``tf.io.gfile`` URI), ``compile``
never touches it, and TFX's FileBasedDriver fingerprints the input (names, sizes, mtimes)
and resolves ``{SPAN}``, so an unchanged folder is a cache hit.

One pass: each image is read and decoded once and turned straight into its example,
written as it is made (``streaming_write.py``). The one whole-data fact an example needs,
its brightness slice, is decided from a sample read first (``data/images/brightness.py``:
why a sample, and why the same rule as the prepare step). Units (an image file, a CIFAR
batch, a TFRecord file) are read in that rule's seeded order (``image_tasks.py``), so the
sample is the head of the read: a folder's sample files are known from their names and
are read in parallel, their decoded images held (at most ``brightness.SAMPLE_SIZE``) until
the bounds are known, then handed to the stage that makes every example together with the
other tasks (one stage: examples are never encoded between stages); a batch or TFRecord
file holds an unknown number of images, so one worker reads the leading files in turn
until it has the sample and writes what it read. The other tasks wait for the bounds (a
Beam side input, so this runs on any runner) and then convert and write in parallel. For
TFRecords the class list (a label id is the class's index in it) comes from a label-only
read of the records (``records.record_labels``): TensorFlow's parser skips the pixels, so
it costs far less than the conversion, and it trusts nothing beside the records (a
``manifest.json`` may be older than them). What this costs and saves against the former
two passes and TFX's ImportExampleGen: docs/history/benchmarks-log.md, "A single pass over the images".

Every unreadable file is listed, not just the first: the pass sets them aside and stages
them, with the class list and shape, in the executor's scratch folder; once the Beam
pipeline is done, ``Do`` removes what was written and raises one DataError naming them,
or records the facts on the Examples artifact (``data_facts.py``). The train/eval split is
ExampleGen's hash on ``example_id``, and examples are identical to the prepare step's.
"""
from __future__ import annotations

import dataclasses
import itertools
import json
import os
from typing import Any

from stackenv import progress

import apache_beam as beam
import numpy as np
import tensorflow as tf
from tfx.components.example_gen.base_example_gen_executor import _PartitionFn
from tfx.components.example_gen.component import FileBasedExampleGen
from tfx.dsl.components.base import executor_spec
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import proto_utils

from components.data_facts import attach_facts, publish
from components.image_tasks import Task, parse_task, task_index, tasks_in_order, write_tasks
from components.ingest_config import read_settings, source_root
from components.ingest_driver import TreeFingerprintDriver
from components.streaming_write import StreamingExampleGenExecutor
from data import features
from data.errors import DataError
from data.images import brightness
from data.images.brightness import bucket, image_mean, image_means, thresholds
from data.images.records import record_labels
from data.images.sources import (
    BAD_FILES_SHOWN,
    BUNDLED_DIGITS,
    Image,
    Listing,
    classes_of,
    list_source,
    read_unit,
    unreadable_files,
    why_unreadable,
)
from data.images.writer import example_bytes

#: The counter of the runner's live progress line (``stackenv/progress.py``).
EXAMPLES_MADE = "examples made"
#: Images decoded before their examples are made (a folder task's files, or a part of a batch
#: or TFRecord file): a bound on what a worker holds decoded.
DECODE_CHUNK = 256
#: exec_properties key (set by the executor, never by a user): its scratch folder.
SCRATCH_KEY = "_image_scratch"
_UNREADABLE, _BOUNDS = "unreadable", "bounds"
_TASKS_FILE, _FACTS_FILE = "tasks.jsonl", "source_facts.json"


def _images(task: Task, listing: Listing):
    """The images of a task, each read and decoded once; a folder file that cannot be read is
    set aside (tagged ``unreadable``: every one is listed) and the task goes on. A bad CIFAR
    batch or TFRecord file stops the run: the whole source is suspect."""
    for unit in task[1]:
        try:
            yield from read_unit(unit, listing)
        except DataError as exc:
            if unit.kind != "folder":
                raise
            yield beam.pvalue.TaggedOutput(_UNREADABLE, (unit.uri, why_unreadable(exc)))


def _example(image: Image, bounds: list[float], label_ids: dict[str, int]) -> tuple[str, bytes]:
    """``(example_id, serialized example)``: the id is what the split is drawn by (``_split_of``)."""
    pixels, label, example_id = image
    return example_id, example_bytes(pixels, label, label_ids[label], bucket(image_mean(pixels), bounds), example_id)


def _split_of(keyed: tuple[str, bytes], num_splits: int, buckets: list[int],
              split_config: example_gen_pb2.SplitConfig) -> int:
    """TFX's hash split (its own partition function) of a serialized example, drawn from an
    example that holds only its id: parsing the whole example back would cost what writing it
    straight saved."""
    example_id = tf.train.Example()
    example_id.features.feature[features.EXAMPLE_ID].bytes_list.value.append(keyed[0].encode("utf-8"))
    return _PartitionFn(example_id, num_splits, buckets, split_config)


def _examples_of(work, listing: Listing, files: int | None, bounds: list[float], classes: list[str]):
    """The examples of a task (its line), or of one image of a folder's sample (decoded by the
    sample's read: ``(pixels, label, id)``). A task's images are decoded a chunk at a time, then
    made into examples: alternating decode and example making image by image keeps neither
    loop's code and data in the CPU's caches, and both ran slower (docs/history/benchmarks-log.md)."""
    label_ids = {name: i for i, name in enumerate(classes)}
    if not isinstance(work, str):
        progress.count(EXAMPLES_MADE, 1, total=files)
        yield _example(work, bounds, label_ids)
        return
    chunk: list[Image] = []
    for item in _images(parse_task(work), listing):
        if isinstance(item, beam.pvalue.TaggedOutput):
            yield item
            continue
        chunk.append(item)
        if len(chunk) == DECODE_CHUNK:
            yield from (_example(image, bounds, label_ids) for image in chunk)
            progress.count(EXAMPLES_MADE, len(chunk), total=files)  # the runner's live line
            chunk = []
    yield from (_example(image, bounds, label_ids) for image in chunk)
    progress.count(EXAMPLES_MADE, len(chunk), total=files)


def _leading_files(_, tasks_file: str, listing: Listing, classes: list[str]):
    """Batches and TFRecord files: read the leading files in turn until the sample is complete,
    then write what was read (the held sample, the rest of its last file); tagged ``bounds``:
    the bounds and how many leading tasks this read, which the parallel tasks skip."""
    label_ids, held, bounds, done = {name: i for i, name in enumerate(classes)}, [], None, 0
    for task in tasks_in_order(tasks_file):
        if bounds is not None:
            break
        for image in _images(task, listing):
            progress.count(EXAMPLES_MADE)
            if bounds is not None:
                yield _example(image, bounds, label_ids)
                continue
            held.append(image)
            if len(held) == brightness.SAMPLE_SIZE:
                bounds = thresholds(image_means(np.stack([pixels for pixels, _, _ in held])))
                yield from (_example(one, bounds, label_ids) for one in held)
                held = []
        done = task[0] + 1
    if bounds is None:  # the source is no larger than the sample: its exact bounds
        bounds = thresholds(image_means(np.stack([pixels for pixels, _, _ in held]))) if held else [0.0, 0.0]
        yield from (_example(one, bounds, label_ids) for one in held)
    yield beam.pvalue.TaggedOutput(_BOUNDS, (bounds, done))


def _sample_bounds(means: list[float]) -> list[float]:
    return thresholds(means) if means else [0.0, 0.0]


class _Unreadable(beam.CombineFn):
    """The unreadable files: the first ``BAD_FILES_SHOWN`` by name, and their number."""

    def create_accumulator(self):
        return [], 0

    def add_input(self, acc, bad: tuple[str, str]):
        return sorted([*acc[0], bad])[:BAD_FILES_SHOWN], acc[1] + 1

    def merge_accumulators(self, accs):
        shown, count = [], 0
        for some, n in accs:
            shown, count = sorted(shown + some)[:BAD_FILES_SHOWN], count + n
        return shown, count

    def extract_output(self, acc):
        return {"shown": acc[0], "count": acc[1]}


def _class_list(pipeline: beam.Pipeline, tasks: beam.pvalue.PCollection, listing: Listing):
    """The sorted class list, a one-element PCollection: from the listing, or the records' labels."""
    if listing.classes is not None:
        return pipeline | "KnownClasses" >> beam.Create([list(listing.classes)])
    return (tasks | "SpreadLabelReads" >> beam.Reshuffle()
            | "Labels" >> beam.FlatMap(lambda line: set().union(*(record_labels(u.uri) for u in parse_task(line)[1])))
            | "Classes" >> beam.combiners.ToSet()
            | "CheckClasses" >> beam.Map(lambda labels: classes_of(list(labels), listing.root)))


def _stage(classes: list[str], unreadable: dict[str, Any], listing: Listing, path: str) -> None:
    facts = {"kind": "image", "classes": classes, "image_shape": list(listing.shape), "root": listing.root,
             "unreadable": unreadable, **({"unused": listing.unused} if listing.unused else {})}
    with tf.io.gfile.GFile(path, "w") as out:
        out.write(json.dumps(facts))


@beam.ptransform_fn
@beam.typehints.with_input_types(beam.Pipeline)
def _ImagesToExamples(pipeline: beam.Pipeline, exec_properties: dict[str, Any],  # noqa: N802 (Beam's style)
                      split_pattern: str) -> beam.pvalue.PCollection:
    settings = read_settings(exec_properties)
    root = source_root(exec_properties[standard_component_specs.INPUT_BASE_KEY], split_pattern)
    listing = list_source(root, settings.get("image_size"), settings.get("channels"),
                          bool(settings.get("follow_links")))
    scratch = exec_properties[SCRATCH_KEY]
    tasks_file = f"{scratch}/{_TASKS_FILE}"
    sample_tasks = write_tasks(listing, tasks_file)
    files = len(listing.units) if listing.kind == "folder" else None
    listing = dataclasses.replace(listing, units=())  # what the readers need, without a copy of every unit
    tasks = pipeline | "ReadTasks" >> beam.io.ReadFromText(tasks_file)  # lines, parsed where they are read
    classes = beam.pvalue.AsSingleton(_class_list(pipeline, tasks, listing))
    unreadable = []
    if sample_tasks is not None:  # a folder: the sample's files are known by name, read in parallel
        sample = (tasks | "SampleTasks" >> beam.Filter(lambda line: task_index(line) < sample_tasks)
                  | "SpreadSample" >> beam.Reshuffle()
                  | "ReadSample" >> beam.FlatMap(lambda line: _images(parse_task(line), listing)).with_outputs(
                      _UNREADABLE, main="images"))
        unreadable.append(sample[_UNREADABLE])
        bounds = (sample.images | "SampleMeans" >> beam.Map(lambda image: image_mean(image[0]))
                  | "AllSampleMeans" >> beam.combiners.ToList() | "Bounds" >> beam.Map(_sample_bounds))
        rest = tasks | "OtherTasks" >> beam.Filter(lambda line: task_index(line) >= sample_tasks)
        sampled = []
    else:  # batches, TFRecord files: how many images a file holds is known once it is read
        lead = (pipeline | "Start" >> beam.Create([None])
                | "ReadLeadingFiles" >> beam.FlatMap(_leading_files, tasks_file, listing, classes).with_outputs(
                    _BOUNDS, main="examples"))
        bounds = lead[_BOUNDS] | "Bounds" >> beam.Map(lambda pair: pair[0])
        done = beam.pvalue.AsSingleton(lead[_BOUNDS] | "LeadingTasks" >> beam.Map(lambda pair: pair[1]))
        rest = tasks | "OtherTasks" >> beam.Filter(lambda line, done: task_index(line) >= done, done)
        sampled = [lead.examples]
    work = rest | "Spread" >> beam.Reshuffle()  # parallel reads: tasks spread over the workers
    if sample_tasks is not None:  # the sample's images join the tasks: one stage makes every example
        work = (sample.images, work) | "SampleAndTasks" >> beam.Flatten()
    made = work | "ToExamples" >> beam.FlatMap(_examples_of, listing, files, beam.pvalue.AsSingleton(bounds),
                                               classes).with_outputs(_UNREADABLE, main="examples")
    unreadable.append(made[_UNREADABLE])
    bad = unreadable | "AllUnreadable" >> beam.Flatten() | "Unreadable" >> beam.CombineGlobally(_Unreadable())
    _ = (pipeline | "StageOnce" >> beam.Create([None])
         | "StageFacts" >> beam.Map(lambda _, classes, bad: _stage(classes, bad, listing, f"{scratch}/{_FACTS_FILE}"),
                                    classes, beam.pvalue.AsSingleton(bad)))
    return made.examples if not sampled else (*sampled, made.examples) | "AllExamples" >> beam.Flatten()


class ImageExampleGenExecutor(StreamingExampleGenExecutor):
    """Reads an image source through ``tf.io.gfile`` with Beam; split as configured. The image source lists
    its files in a seeded random order, so each split is written as two files (``FILES_PER_SPLIT``):
    StatisticsGen reads them on two threads (docs/history/benchmarks-log.md, "Two files a split")."""

    FILES_PER_SPLIT = 2

    def GetInputSourceToExamplePTransform(self) -> beam.PTransform:  # noqa: N802 (TFX's name)
        return _ImagesToExamples

    def Do(self, input_dict, output_dict, exec_properties) -> None:  # noqa: N802 (TFX's name)
        outputs = output_dict[standard_component_specs.EXAMPLES_KEY]
        # In the output directory, where every worker of a distributed runner can reach it;
        # removed once the examples are written (a failed run's output is not used).
        scratch = os.path.join(outputs[0].uri, ".scratch")
        tf.io.gfile.makedirs(scratch)
        try:
            super().Do(input_dict, output_dict, {**exec_properties, SCRATCH_KEY: scratch})
            with tf.io.gfile.GFile(os.path.join(scratch, _FACTS_FILE)) as staged:
                facts = json.loads(staged.read())
            if facts["unreadable"]["count"]:
                for split in artifact_utils.decode_split_names(outputs[0].split_names):
                    tf.io.gfile.rmtree(artifact_utils.get_split_uri(outputs, split))
                bad = facts["unreadable"]
                raise unreadable_files([tuple(each) for each in bad["shown"]], bad["count"], facts["root"])
            publish(outputs[0], facts)
        finally:
            tf.io.gfile.rmtree(scratch)

    def GenerateExamplesByBeam(self, pipeline, exec_properties):  # noqa: N802 (TFX's hook)
        """TFX's (one input split hashed into the output splits) on serialized examples keyed by id."""
        input_config, output_config = example_gen_pb2.Input(), example_gen_pb2.Output()
        proto_utils.json_to_proto(exec_properties[standard_component_specs.INPUT_CONFIG_KEY], input_config)
        proto_utils.json_to_proto(exec_properties[standard_component_specs.OUTPUT_CONFIG_KEY], output_config)
        split_config = output_config.split_config
        if split_config.partition_feature_name != features.EXAMPLE_ID:
            raise ValueError(f"The image ExampleGen splits on {features.EXAMPLE_ID!r}, "
                             f"not {split_config.partition_feature_name!r}")
        buckets = list(itertools.accumulate(split.hash_buckets for split in split_config.splits))
        keyed = pipeline | "InputToRecord" >> _ImagesToExamples(exec_properties, input_config.splits[0].pattern)
        parts = keyed | "SplitData" >> beam.Partition(_split_of, len(buckets), buckets, split_config)
        splits = {split.name: part | f"Serialized[{split.name}]" >> beam.Map(lambda pair: pair[1])
                  for split, part in zip(split_config.splits, parts)}
        attach_facts(splits, exec_properties)  # the split counts (the source's facts: Do)
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

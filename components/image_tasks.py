"""The image ExampleGen's task list: a source's units in their read order, grouped, one text line each.

Why a file, not ``beam.Create``: a ``Create`` of a million file names is decoded by every
multi_processing worker and would exceed a Dataflow job graph's size limit. The listing
is written once, as JSON lines, and read back with ``beam.io.ReadFromText``, which a
distributed runner splits over its workers like any text input; a line carries its own
task index, so no read order is assumed.

Why this order: units in the seeded order of ``data.images.brightness`` (a hash of each
unit's name). A folder lists its files class by class and nothing reorders the examples
before the write (``streaming_write.py``), so a reader with a bounded shuffle buffer would
otherwise see one class at a time; the same folder is written in the same order on every
run; and the leading units are the brightness sample, which the ExampleGen reads first.

A task travels through the Beam graph as its text line and is parsed where it is read:
a line is one string to encode between stages, a task of 256 units 256 pickled objects.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator

import tensorflow as tf

from data.images import brightness
from data.images.sources import Listing, Unit, unit_key

#: Image files read by one task. Files are small: one element per file would cost the
#: runner more per element than the file itself. Batches and TFRecord files are big: one per task.
FILES_PER_TASK = 256

#: (task index, its units)
Task = tuple[int, tuple[Unit, ...]]


def write_tasks(listing: Listing, path: str) -> int | None:
    """Write the tasks of ``listing`` to ``path`` (any ``tf.io.gfile`` URI), one line each.

    Returns how many leading tasks hold the brightness sample when the names alone say so
    (a folder: one image per file); None when only reading tells (a batch or TFRecord file
    holds an unknown number of images: the ExampleGen reads leading tasks until it has them).
    """
    units = sorted(listing.units, key=lambda unit: brightness.unit_rank(unit_key(unit)))
    if listing.kind == "folder":
        size = brightness.SAMPLE_SIZE
        sample = _grouped(units[:size], FILES_PER_TASK)
        tasks, sample_tasks = sample + _grouped(units[size:], FILES_PER_TASK), len(sample)
    else:
        tasks, sample_tasks = _grouped(units, 1), None
    with tf.io.gfile.GFile(path, "w") as out:
        for index, task in enumerate(tasks):
            out.write(json.dumps([index, [dataclasses.astuple(unit) for unit in task]]) + "\n")
    return sample_tasks


def _grouped(units: list[Unit], size: int) -> list[tuple[Unit, ...]]:
    return [tuple(units[i:i + size]) for i in range(0, len(units), size)]


def parse_task(line: str) -> Task:
    index, units = json.loads(line)
    return index, tuple(Unit(*fields) for fields in units)


def task_index(line: str) -> int:
    """A task line's index (its position in the read order)."""
    return int(line[1:line.index(",")])


def tasks_in_order(path: str) -> Iterator[Task]:
    """The tasks from the first, for one worker reading the leading ones in turn."""
    with tf.io.gfile.GFile(path) as lines:
        for line in lines:
            yield parse_task(line)

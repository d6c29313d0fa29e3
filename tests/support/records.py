"""Readers the tests use to look inside what the pipeline wrote (the pipeline itself streams)."""
from __future__ import annotations

import os
from collections.abc import Iterator

import tensorflow as tf

from data.tfrecords import iter_file_examples, iter_records, list_files
from models.common.warmup import read_warmup_requests


def read_examples(pattern: str | os.PathLike) -> Iterator[tf.train.Example]:
    """The parsed examples of all files matching ``pattern``, in file-name order."""
    for path in list_files(pattern):
        yield from iter_file_examples(path)


def count_records(pattern: str | os.PathLike) -> int:
    """Number of records in all files matching ``pattern`` (reads and checks every file)."""
    return sum(1 for path in list_files(pattern) for _ in iter_records(path))


def replay_warmup_requests(saved_model, export_dir: str) -> int:
    """Run every warm-up request through its signature, as TF Serving does at load."""
    requests = read_warmup_requests(export_dir)
    for signature_name, inputs in requests:
        saved_model.signatures[signature_name](**{k: tf.constant(v) for k, v in inputs.items()})
    return len(requests)

"""tf.data input over TFT-transformed, GZIP TFRecord examples.

Why an in-memory path: the transformed splits are small (the digits: 3 MB parsed), and
with the records cached, a streaming pipeline still pays per *example* every epoch (cache
read, shuffle buffer, batch) and re-parses every record: it measured 1.04x the naive
sequential pipeline (benchmarks/bench_input.py). Held in memory as parsed tensors, the
epochs cost per *batch* only: 2.8-3.6x naive on local disk, 7.4-8.0x with slow storage
(15 and 3 epochs of 11.6k digits, 2 busy cores; see benchmarks/README.md).

- **In memory** (``cache=True``, eager, ``FixedLenFeature``s only, parsed size within
  ``memory_budget_bytes``, default :data:`IN_MEMORY_BUDGET_BYTES`): ``make_dataset``
  reads and parses the split ONCE (blocks of records, one ``parse_example`` each, ``LOAD_PARSERS``
  at a time; files read concurrently; the load is abandoned as soon as the parsed size passes the budget).
  Each epoch draws a random permutation of the example indices (a uniform shuffle, not a
  buffer's), ``tf.gather``s chunks of ``CHUNK_BATCHES`` batches and ``rebatch``es them.
  Epochs form one stream, as ``repeat().batch()`` does: each example appears exactly once
  per epoch of the stream; no example is dropped at epoch boundaries. No autotuning:
  nothing to tune, and its per-element bookkeeping was ~40% of a batch's time.
  Memory: the parsed tensors (up to 2x while loading), plus a chunk in flight.
- **Streaming** (otherwise, and above the budget): parallel interleaved file reads, cache
  of the serialized records, shuffle buffer, repeat, parsing after batching, prefetch.
  ``parallel=False, cache=False`` is the naive pipeline the benchmark compares against.

The in-memory tensors are captured by a tf.data function, so they are embedded in the
dataset's graph whenever it is serialized (``tf.distribute`` does that only to copy a
dataset to a device other than the one it was built on; tf.data service; multi-worker):
the budget keeps that far below protobuf's 2 GB limit. It also turns tf.distribute's
auto-sharding off (its rewrite breaks ``rebatch``), so every worker would see every
example: multi-worker training passes ``memory_budget_bytes=0`` (TrainingSettings does).

Raw examples (``transform``): a family whose Transform only analyses (``materialize=False``) reads
ExampleGen's examples and passes the transform graph's function, which both paths apply to each parsed
block or batch; the label key and the budget are then of its outputs.

Both paths: ``(features without the label, label)`` batches; reshuffled on every
iteration (deterministically for a given ``seed``); ``shuffle=False`` keeps the sorted
file order; ``repeat=True`` drops the remainder (static batch size), ``repeat=False``
yields every example exactly once, the last batch possibly partial.
"""
import logging
import os
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE
#: Parsed features -> the features a model reads (a Transform graph applied to raw examples).
Transform = Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]]
#: Parsed tensors up to this size are held in memory (``memory_budget_bytes`` default).
IN_MEMORY_BUDGET_BYTES = 256 * 1024 * 1024
#: Records per read block when loading (one ``parse_example`` call each).
LOAD_BLOCK = 1024
#: Files read concurrently when loading in memory (``parallel=True``).
LOAD_MAX_FILES_IN_FLIGHT = 16
#: Blocks parsed (and transformed) at once when loading in memory (``parallel=True``): the cores, up to 4.
LOAD_PARSERS = min(4, os.cpu_count() or 1)
#: Batches gathered at once from the in-memory tensors.
CHUNK_BATCHES = 16
#: Chunks gathered ahead, in a background thread, by the in-memory path (``parallel=True``).
PREFETCH_CHUNKS = 1

log = logging.getLogger(__name__)


def make_dataset(
    file_patterns: str | Sequence[str],
    feature_spec: Mapping[str, tf.io.FixedLenFeature],
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool = True,
    repeat: bool = True,
    cache: bool = True,
    seed: int | None = None,
    parallel: bool = True,
    shuffle_buffer: int = 10_000,
    memory_budget_bytes: int | None = None,
    data_service: str = "",
    transform: Transform | None = None,
) -> tf.data.Dataset:
    """Yield ``(features, label)`` batches; ``features`` holds every key but the label.

    ``shuffle_buffer`` applies to the streaming path only (in memory the shuffle is
    complete); ``memory_budget_bytes`` (default :data:`IN_MEMORY_BUDGET_BYTES`, 0 = never)
    bounds the parsed size the in-memory path may hold. ``data_service`` (``auto`` or a
    dispatcher address) reads the batches through tf.data service workers instead
    (models/common/data_service.py; the shuffle is then unseeded, as explained there).
    ``transform`` maps parsed ``feature_spec`` tensors to the features and label yielded.
    """
    if data_service:
        from models.common import data_service as service

        dispatcher = service.target(data_service)  # checked before any work
        dataset = make_dataset(file_patterns, feature_spec, label_key, batch_size, shuffle=shuffle,
                               repeat=repeat, cache=cache, seed=None, parallel=parallel,
                               shuffle_buffer=shuffle_buffer, memory_budget_bytes=memory_budget_bytes,
                               transform=transform)
        return service.distribute(dataset, dispatcher)
    patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
    budget = IN_MEMORY_BUDGET_BYTES if memory_budget_bytes is None else memory_budget_bytes
    if cache and budget > 0 and tf.executing_eagerly() and _all_fixed_len(feature_spec):
        data = _load_in_memory(patterns, feature_spec, budget, parallel, transform)
        if data is not None:
            return _in_memory_dataset(data, label_key, batch_size, shuffle=shuffle, repeat=repeat,
                                      seed=seed, parallel=parallel)
    return _streaming_dataset(patterns, feature_spec, label_key, batch_size, shuffle=shuffle,
                              repeat=repeat, cache=cache, seed=seed, parallel=parallel,
                              shuffle_buffer=shuffle_buffer, transform=transform)


# ------------------------------------------------------------------------ in memory


def _all_fixed_len(feature_spec) -> bool:
    return bool(feature_spec) and all(
        isinstance(f, tf.io.FixedLenFeature) and f.shape is not None and None not in tuple(f.shape)
        for f in feature_spec.values())


def _load_in_memory(patterns: list[str], feature_spec, budget: int, parallel: bool,
                    transform: Transform | None = None) -> dict[str, tf.Tensor] | None:
    """Every example of the files, parsed (and transformed), in sorted file order; None if over ``budget``."""
    files = sorted(f for p in patterns for f in tf.io.gfile.glob(p))  # as list_files
    if not files:
        return None  # the streaming path raises its usual "no files matched" error
    compressed = sum(tf.io.gfile.stat(f).length for f in files)
    if compressed > budget:  # parsed tensors are rarely smaller than the GZIP files
        log.info("Input: %d bytes of files > in-memory budget %d: not held in memory", compressed, budget)
        return None
    spec = dict(feature_spec)

    @_no_autograph
    def decode(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        return transform(parsed) if transform else parsed

    @_no_autograph
    def read(path):
        return tf.data.TFRecordDataset(path, compression_type="GZIP").batch(LOAD_BLOCK)

    @_no_autograph
    def read_tagged(index, path):  # -> (file index, (block index in the file, records))
        return tf.data.Dataset.zip(tf.data.Dataset.from_tensors(index).repeat(),
                                   read(path).enumerate())

    with tf.device("/cpu:0"):
        paths = tf.data.Dataset.from_tensor_slices(files)
        options = _static_options()
        concurrent = parallel and len(files) > 1
        if concurrent:
            in_flight = min(len(files), LOAD_MAX_FILES_IN_FLIGHT)
            blocks = tf.data.Dataset.zip(tf.data.Dataset.range(len(files)), paths).interleave(
                read_tagged, cycle_length=in_flight, num_parallel_calls=in_flight,
                deterministic=True)  # round robin over the files: sorted below
            # Threads for blocking reads (e.g. a file system's time to first byte), not CPU.
            options.threading.private_threadpool_size = in_flight
            blocks = blocks.map(_no_autograph(lambda index, block: (index, (block[0], decode(block[1])))),
                                num_parallel_calls=LOAD_PARSERS, deterministic=True)
        else:
            blocks = paths.flat_map(read)  # the files one after the other
            blocks = blocks.map(decode, num_parallel_calls=LOAD_PARSERS if parallel else None, deterministic=True)
        if parallel:
            blocks = blocks.prefetch(2)  # decode the next blocks while this thread collects
        blocks = blocks.with_options(options)
        parsed_blocks = []
        size = 0
        key: tuple[int, int] | int  # (file, block in the file) when read concurrently, else the block's ordinal
        for ordinal, item in enumerate(blocks):
            if concurrent:
                index, (position, parsed) = item
                key = (int(index), int(position))
            else:
                key, parsed = ordinal, item
            size += sum(_num_elements(value.shape) * value.dtype.size for value in parsed.values())
            if size > budget:
                log.info("Input: parsed examples exceed the in-memory budget (%d bytes): not held in memory",
                         budget)
                return None
            parsed_blocks.append((key, parsed))
        if not parsed_blocks:
            return None
        parsed_blocks.sort(key=lambda block: block[0])
        return {key: tf.concat([parsed[key] for _, parsed in parsed_blocks], axis=0)
                for key in parsed_blocks[0][1]}


def _num_elements(shape) -> int:
    count = 1
    for dim in shape:
        count *= int(dim)
    return count


def _static_options() -> tf.data.Options:
    """For the in-memory path's pipelines: nothing to tune or rewrite there, and autotuning's
    per-element bookkeeping alone costs ~40% of a batch's time (bench_input)."""
    options = tf.data.Options()
    options.autotune.enabled = False
    options.experimental_optimization.apply_default_optimizations = False
    # tf.distribute's auto-shard rewrites a RebatchDatasetV2 into the legacy per-replica
    # rebatch, which leaves the gathered chunks unsplit ("expected [64,64], got [1024,64]").
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return options


def _no_autograph(fn):
    """Plain tensor code: skip AutoGraph's conversion (tens of ms per traced function)."""
    return tf.autograph.experimental.do_not_convert(fn)


def _in_memory_dataset(data: dict[str, tf.Tensor], label_key: str, batch_size: int, *,
                       shuffle: bool, repeat: bool, seed: int | None,
                       parallel: bool) -> tf.data.Dataset:
    count = int(next(iter(data.values())).shape[0])
    with tf.device("/cpu:0"):
        if shuffle:
            # One int64 per epoch; new ones on every iteration of the dataset.
            seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
            seeds = seeds if repeat else seeds.take(1)
            epochs = seeds.map(_no_autograph(lambda s: tf.random.experimental.stateless_shuffle(
                tf.range(count, dtype=tf.int64), seed=tf.stack([s, tf.constant(0, tf.int64)]))))
        else:
            epochs = tf.data.Dataset.from_tensors(tf.range(count, dtype=tf.int64))
            epochs = epochs.repeat() if repeat else epochs

        @_no_autograph
        def gather(indices):
            features = {key: tf.gather(values, indices) for key, values in data.items()}
            label = features.pop(label_key)
            return features, label

        chunks = epochs.rebatch(batch_size * CHUNK_BATCHES)  # index chunks, across epochs
        rows = chunks.map(gather)
        if parallel:
            # The next chunk is gathered in the background. Prefetching per batch instead
            # measured slower on busy cores (a thread hand-off per batch; benchmarks/README.md).
            rows = rows.prefetch(PREFETCH_CHUNKS)
        batches = rows.rebatch(batch_size, drop_remainder=repeat)
        return batches.with_options(_static_options())


# ------------------------------------------------------------------------ streaming


def _streaming_dataset(patterns: list[str], feature_spec, label_key: str, batch_size: int, *,
                       shuffle: bool, repeat: bool, cache: bool, seed: int | None,
                       parallel: bool, shuffle_buffer: int, transform: Transform | None = None) -> tf.data.Dataset:
    files = tf.data.Dataset.list_files(patterns, shuffle=shuffle, seed=seed)
    read = lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP")  # noqa: E731
    if parallel:
        records = files.interleave(read, num_parallel_calls=AUTOTUNE,
                                   deterministic=seed is not None or not shuffle)
    else:
        records = files.flat_map(read)
    if cache:
        records = records.cache()
    if shuffle:
        records = records.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        records = records.repeat()
    batches = records.batch(batch_size, drop_remainder=repeat)

    def parse(serialized):
        features = tf.io.parse_example(serialized, dict(feature_spec))
        features = transform(features) if transform else features
        label = features.pop(label_key)
        return features, label

    batches = batches.map(parse, num_parallel_calls=AUTOTUNE if parallel else None)
    batches = batches.prefetch(AUTOTUNE) if parallel else batches
    # Across workers, each reads every file and keeps its share of the batches: FILE
    # sharding needs at least one file per worker, and ExampleGen and Transform may write one per split.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return batches.with_options(options)


def load_split(file_patterns: str | Sequence[str],
               feature_spec: Mapping[str, tf.io.FixedLenFeature],
               memory_budget_bytes: int | None = None,
               transform: Transform | None = None, *,
               tensors: bool = False) -> dict[str, np.ndarray] | dict[str, tf.Tensor] | None:
    """Every example of a split as numpy arrays (sorted file order), or None when it is not
    held in memory (over the budget, variable-length features, not eager): for trainers
    that need the whole split at once (a held-out part of train, reference predictors).
    ``transform`` as in :func:`make_dataset`.

    The arrays are read-only views of the loaded tensors: ``Tensor.numpy()`` copies, and a copy of
    160,000 digits' pixels took a second here (docs/history/benchmarks-log.md, "Two files a split").
    ``tensors=True`` returns the tensors themselves, for a caller that hands them to TensorFlow again:
    ``tf.convert_to_tensor`` copies a numpy array, even such a view (``np.asarray`` of a tensor does not), and
    at 800,000 digits that copy was most of a Trainer's memory (docs/history/benchmarks-log.md, "Raw pixels in
    memory")."""
    budget = IN_MEMORY_BUDGET_BYTES if memory_budget_bytes is None else memory_budget_bytes
    if budget <= 0 or not tf.executing_eagerly() or not _all_fixed_len(feature_spec):
        return None
    patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
    data = _load_in_memory(patterns, feature_spec, budget, parallel=True, transform=transform)
    if data is None or tensors:
        return data
    return {key: np.asarray(value) for key, value in data.items()}

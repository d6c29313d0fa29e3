"""tf.data input over TFT-transformed, GZIP TFRecord examples.

Follows the TF data-performance guide: parallel interleaved file reads, cache of the
serialized records (safe: they are immutable and small next to memory), shuffle and
repeat on the cached records, vectorised parsing after batching, prefetch(AUTOTUNE).
``parallel=False`` gives the naive sequential pipeline the benchmarks compare against.
"""
from typing import Mapping, Optional, Sequence, Union

import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


def make_dataset(
    file_patterns: Union[str, Sequence[str]],
    feature_spec: Mapping[str, tf.io.FixedLenFeature],
    label_key: str,
    batch_size: int,
    *,
    shuffle: bool = True,
    repeat: bool = True,
    cache: bool = True,
    seed: Optional[int] = None,
    parallel: bool = True,
    shuffle_buffer: int = 10_000,
) -> tf.data.Dataset:
    """Yield ``(features, label)`` batches; ``features`` holds every key but the label."""
    patterns = [file_patterns] if isinstance(file_patterns, str) else list(file_patterns)
    files = tf.data.Dataset.list_files(patterns, shuffle=shuffle, seed=seed)
    read = lambda path: tf.data.TFRecordDataset(path, compression_type="GZIP")  # noqa: E731
    if parallel:
        records = files.interleave(read, num_parallel_calls=AUTOTUNE, deterministic=seed is not None)
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
        label = features.pop(label_key)
        return features, label

    batches = batches.map(parse, num_parallel_calls=AUTOTUNE if parallel else None)
    return batches.prefetch(AUTOTUNE) if parallel else batches

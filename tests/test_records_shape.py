"""TFRecords keep their stored shape: --image-size resizes them, it never re-reads the pixels."""
from pathlib import Path

import numpy as np
import tensorflow as tf
from support.records import read_examples

from data import features
from data.images import prepare_image_dataset
from data.tfrecords import write_examples


def _rgb_examples(count: int = 6, side: int = 8):
    rng = np.random.default_rng(0)
    for i in range(count):
        pixels = rng.integers(0, 256, size=side * side * 3)
        yield tf.train.Example(features=tf.train.Features(feature={
            features.IMAGE: tf.train.Feature(int64_list=tf.train.Int64List(value=pixels.tolist())),
            features.LABEL: tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"ab"[i % 2:i % 2 + 1]])),
        }))


def test_8x8x3_records_with_image_size_4_are_resized_not_reinterpreted(tmp_path: Path) -> None:
    write_examples(list(_rgb_examples()), tmp_path / "src")
    dataset = prepare_image_dataset(tmp_path / "src", tmp_path / "cache", image_size=4)
    assert list(dataset.image_shape) == [4, 4, 3]  # not [4, 4, 12]: same pixels, other meaning
    first = next(iter(read_examples(dataset.examples_glob)))
    assert len(first.features.feature[features.IMAGE].int64_list.value) == 4 * 4 * 3

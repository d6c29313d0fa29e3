"""The Pusher's TFLite step on a real (tiny) SavedModel: what it writes, and what it refuses to write."""
import os

import numpy as np
import pytest
import tensorflow as tf

from components import tflite_export
from models.cnn.tflite import TFLITE
from pipeline.results import tflite_summary


class _Tiny(tf.Module):
    """A predict_image signature like the CNN's: pixels [N, 8, 8, 1] in 0-255 -> probabilities."""

    def __init__(self):
        super().__init__()
        self.weights = tf.Variable(np.random.RandomState(0).randn(64, 10).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 1], tf.float32, name="images")])
    def predict_image(self, images):
        logits = tf.matmul(tf.reshape(images, [-1, 64]) / 255.0, self.weights)
        return {"probabilities": tf.nn.softmax(logits)}


def _write_split(uri, split, count, seed):
    rng = np.random.RandomState(seed)
    os.makedirs(os.path.join(uri, f"Split-{split}"))
    path = os.path.join(uri, f"Split-{split}", "data_tfrecord-00000-of-00001.gz")
    with tf.io.TFRecordWriter(path, options="GZIP") as writer:
        for _ in range(count):
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "image": tf.train.Feature(int64_list=tf.train.Int64List(value=rng.randint(0, 256, 64))),
                "label_id": tf.train.Feature(int64_list=tf.train.Int64List(value=[rng.randint(10)])),
            })).SerializeToString())


@pytest.fixture(scope="module")
def model_and_examples(tmp_path_factory):
    root = tmp_path_factory.mktemp("tflite")
    module = _Tiny()
    tf.saved_model.save(module, str(root / "model"), signatures={"predict_image": module.predict_image})
    _write_split(str(root / "examples"), "train", 120, seed=1)
    _write_split(str(root / "examples"), "eval", 80, seed=2)
    return str(root / "model"), str(root / "examples")


def test_written_models_agree_with_the_saved_model(model_and_examples, tmp_path):
    model_dir, examples = model_and_examples
    record = tflite_export.export_tflite(TFLITE, model_dir, examples, str(tmp_path))
    assert record["eval_examples"] == 80 and record["calibration_examples"] == 120
    images, _ = TFLITE.examples(tflite_export.sample_examples(examples, "eval", 1000), (8, 8, 1))
    reference = tf.saved_model.load(model_dir).signatures["predict_image"](images=tf.constant(images))
    runner = tf.lite.Interpreter(model_path=str(tmp_path / "tflite" / "model_float16.tflite")).get_signature_runner(
        "predict_image")
    agreement = np.mean(runner(images=images)["probabilities"].argmax(-1)
                        == reference["probabilities"].numpy().argmax(-1))
    assert agreement >= 0.99 and record["float16"]["written"] is True


def test_a_model_below_its_floor_is_not_written_and_the_summary_says_why(model_and_examples, tmp_path, monkeypatch):
    model_dir, examples = model_and_examples
    monkeypatch.setattr(tflite_export, "MIN_AGREEMENT", {"float16": 1.01, "int8": 1.01})
    record = tflite_export.export_tflite(TFLITE, model_dir, examples, str(tmp_path))
    assert not (tmp_path / "tflite").exists()
    line = tflite_summary.line(record)
    assert "float16 NOT written (agrees with the SavedModel on " in line and "below the 101% required" in line
    assert "int8 NOT written" in line


def test_sample_is_seeded_and_bounded(model_and_examples):
    _, examples = model_and_examples
    first = tflite_export.sample_examples(examples, "train", 30)
    assert len(first) == 30 and first == tflite_export.sample_examples(examples, "train", 30)
    assert first != tflite_export.sample_examples(examples, "train", 30, seed=1)


def test_sample_read_in_batches_is_the_reservoir_over_every_record(model_and_examples, monkeypatch):
    """``sample_examples`` reads records in batches: the sample is still the seeded reservoir over
    every record in file order, wherever the batches end (a batch of one is the record-by-record read)."""
    _, examples = model_and_examples
    monkeypatch.setattr(tflite_export, "READ_BATCH", 1)
    one_by_one = tflite_export.sample_examples(examples, "train", 30)
    for batch in (7, 4096):
        monkeypatch.setattr(tflite_export, "READ_BATCH", batch)
        assert tflite_export.sample_examples(examples, "train", 30) == one_by_one
    files = tflite_export._split_files(examples, "train")
    total = sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP"))
    assert total > 30 and len(one_by_one) == 30   # the reservoir replaced records: the indices mattered
    assert tflite_export.sample_examples(examples, "train", total + 5) == [
        r for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]

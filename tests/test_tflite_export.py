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


def _every_record(examples, split="train"):
    """A split's records, file after file (TensorFlow's own reader over the sorted files): what a sample is
    drawn from, in the order it comes back."""
    files = tflite_export._split_files(examples, split)
    return [r for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


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


def test_sample_read_in_batches_is_the_same_sample_wherever_the_batches_end(model_and_examples, monkeypatch):
    """``sample_examples`` decides a batch at a time: the sample is the same as read record by record (a batch
    of one), and a limit above the split's size returns every record once, in file order."""
    _, examples = model_and_examples
    monkeypatch.setattr(tflite_export, "READ_BATCH", 1)
    one_by_one = tflite_export.sample_examples(examples, "train", 30)
    for batch in (7, 4096):
        monkeypatch.setattr(tflite_export, "READ_BATCH", batch)
        assert tflite_export.sample_examples(examples, "train", 30) == one_by_one
    every = _every_record(examples)
    assert len(every) > 30 and len(one_by_one) == 30 and set(one_by_one) < set(every)
    assert tflite_export.sample_examples(examples, "train", len(every) + 5) == every


def test_sample_is_uniform_over_records(model_and_examples):
    """Over many seeds every record is kept about limit / records of the time (30 of 120: a quarter), the
    first as often as the last: a sample of the whole split, not of the records read first."""
    _, examples = model_and_examples
    every = _every_record(examples)
    position = {record: i for i, record in enumerate(every)}
    kept = np.zeros(len(every))
    seeds = 400
    for seed in range(seeds):
        for record in tflite_export.sample_examples(examples, "train", 30, seed=seed):
            kept[position[record]] += 1
    share = kept / seeds   # each ~ Binomial(400, 0.25) / 400: sd 0.022
    assert np.all(np.abs(share - 0.25) < 0.11), share
    assert abs(share[:60].mean() - share[60:].mean()) < 0.03


def test_a_split_of_several_files_is_read_whole_in_file_order(tmp_path, monkeypatch):
    """The ExampleGen writes a split as several files, read side by side: every record of each is read once,
    the sample comes back in file order, and it does not depend on how the files' batches interleave."""
    for part, seed in ((0, 3), (1, 4)):
        _write_split(str(tmp_path / f"part{part}"), "train", 50 + 20 * part, seed=seed)
        os.makedirs(tmp_path / "examples" / "Split-train", exist_ok=True)
        os.rename(tmp_path / f"part{part}" / "Split-train" / "data_tfrecord-00000-of-00001.gz",
                  tmp_path / "examples" / "Split-train" / f"data_tfrecord-part{part}-00000-of-00001.gz")
    examples = str(tmp_path / "examples")
    every = _every_record(examples)
    assert len(tflite_export._split_files(examples, "train")) == 2
    assert tflite_export.sample_examples(examples, "train", 1000) == every
    sample = tflite_export.sample_examples(examples, "train", 40)
    for batch in (1, 16):
        monkeypatch.setattr(tflite_export, "READ_BATCH", batch)
        assert tflite_export.sample_examples(examples, "train", 40) == sample
    assert len(sample) == 40 and set(sample) < set(every)

"""A served model that cannot parse the new data is found before TFMA runs (real SavedModels, real TFRecords)."""
import os

import tensorflow as tf
from tfx.types import standard_artifacts

from components.evaluator import served_model_cannot_read


def _saved_model(path: str, length: int) -> str:
    spec = {"image": tf.io.FixedLenFeature([length], tf.int64)}

    class Served(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="examples")])
        def serve(self, examples):
            return {"sum": tf.reduce_sum(tf.io.parse_example(examples, spec)["image"], axis=1)}

    module = Served()
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    return path


def _examples(root: str, length: int) -> standard_artifacts.Examples:
    artifact = standard_artifacts.Examples()
    artifact.uri = root
    artifact.split_names = '["train", "eval"]'
    os.makedirs(os.path.join(root, "Split-eval"))
    example = tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * length))}))
    with tf.io.TFRecordWriter(os.path.join(root, "Split-eval", "data.gz"), "GZIP") as writer:
        for _ in range(3):
            writer.write(example.SerializeToString())
    return artifact


def test_a_served_model_for_another_image_size_is_detected(tmp_path):
    served = _saved_model(str(tmp_path / "served"), 192)        # 8x8x3
    examples = [_examples(str(tmp_path / "examples"), 768)]      # --image-size 16 now
    reason = served_model_cannot_read(served, examples, {"example_splits": '["eval"]'})
    assert reason and "192" in reason and "768" in reason, reason


def test_a_served_model_that_reads_the_data_passes(tmp_path):
    served = _saved_model(str(tmp_path / "served"), 192)
    assert served_model_cannot_read(served, [_examples(str(tmp_path / "examples"), 192)], {}) is None

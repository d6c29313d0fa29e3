"""The smallest real SavedModel (one variable, one signature-less function) for tests of where
models are published, not of what they compute."""
import tensorflow as tf


class _Scale(tf.Module):
    def __init__(self):
        super().__init__()
        self.scale = tf.Variable(3.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def apply(self, x):
        return x * self.scale


def save_tiny_saved_model(path: str) -> str:
    tf.saved_model.save(_Scale(), path)
    return path

"""Perplexity as a Keras metric, so TFMA can compute it per slice from ``serving_default``.

TFMA instantiates it from ``MetricConfig(class_name="Perplexity",
module="models.seq2seq.metrics")``. It accumulates the summed cross-entropy and the weight
over all batches and exponentiates only at the end: the exp of the mean, not a mean of
per-batch exps, which would overweight bad batches.
"""
import tensorflow as tf


class Perplexity(tf.keras.metrics.Metric):
    """``exp(mean sparse categorical cross-entropy)``: the effective number of equally
    likely next tokens the model hesitates between (vocabulary size for a uniform guess)."""

    def __init__(self, name: str = "perplexity", from_logits: bool = False, dtype=None, **kwargs):
        super().__init__(name=name, dtype=dtype, **kwargs)
        self.from_logits = from_logits
        self.total = self.add_weight(name="total", initializer="zeros")
        self.weight = self.add_weight(name="weight", initializer="zeros")

    def update_state(self, y_true, y_pred, sample_weight=None):
        """``y_true`` [batch] or [batch, 1] ids; ``y_pred`` [batch, vocab] (probabilities)."""
        labels = tf.reshape(tf.cast(y_true, tf.int64), [-1])
        predictions = tf.reshape(tf.cast(y_pred, self.dtype), [tf.size(labels), -1])
        cross_entropy = tf.keras.losses.sparse_categorical_crossentropy(
            labels, predictions, from_logits=self.from_logits)
        weights = tf.ones_like(cross_entropy)
        if sample_weight is not None:
            weights = tf.broadcast_to(tf.reshape(tf.cast(sample_weight, self.dtype), [-1]),
                                      tf.shape(cross_entropy))
        self.total.assign_add(tf.reduce_sum(cross_entropy * weights))
        self.weight.assign_add(tf.reduce_sum(weights))

    def result(self):
        return tf.exp(tf.math.divide_no_nan(self.total, self.weight))

    def reset_state(self):
        self.total.assign(0.0)
        self.weight.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "from_logits": self.from_logits}

"""Encoder-decoder with attention over token ids (tf-keras; no tensorflow-addons).

encoder: shared Embedding(mask_zero) -> LSTM/GRU (all outputs + final state)
decoder: shared Embedding -> LSTM/GRU started from the encoder state -> dot-product
         attention over the encoder outputs -> concat -> Dense(tanh) -> Dense(vocab) logits

The embedding is shared because the decoder emits the tokens the encoder reads and the
corpus is small: one table learns from both sides. ``encode`` and ``decode`` are public so
the export can run the encoder once and then step the decoder inside a graph loop.
Dropout sits between layers, never inside the recurrent cells (recurrent dropout disables
the cuDNN kernel and complicates export).
"""

import tensorflow as tf

from models.seq2seq import features

CELLS = ("lstm", "gru")
LR_SCHEDULES = ("constant", "cosine")


class Seq2Seq(tf.keras.Model):
    """``call({CONTEXT_XF, DECODER_INPUT_XF})`` -> next-token logits [batch, steps, vocab]."""

    def __init__(self, vocab_size: int, embedding_dim: int = 128, units: int = 256,
                 dropout: float = 0.5, cell: str = "lstm", **kwargs):
        super().__init__(**kwargs)
        if cell not in CELLS:
            raise ValueError(f"cell must be one of {CELLS}, got {cell!r}")
        self.vocab_size = vocab_size
        self.cell = cell
        rnn = tf.keras.layers.LSTM if cell == "lstm" else tf.keras.layers.GRU
        self.embedding = tf.keras.layers.Embedding(vocab_size, embedding_dim, mask_zero=True,
                                                   name="embedding")
        self.encoder_rnn = rnn(units, return_sequences=True, return_state=True, name="encoder")
        self.decoder_rnn = rnn(units, return_sequences=True, return_state=True, name="decoder")
        self.attention = tf.keras.layers.Attention(name="attention")
        self.combine = tf.keras.layers.Dense(units, activation="tanh", name="combine")
        self.dropout = tf.keras.layers.Dropout(dropout)
        self.logits = tf.keras.layers.Dense(vocab_size, name="logits")

    def encode(self, context_ids: tf.Tensor, training: bool = False
               ) -> tuple[tf.Tensor, tf.Tensor, list[tf.Tensor]]:
        """[batch, Lc] ids -> (outputs [batch, Lc, units], mask [batch, Lc], final states)."""
        embedded = self.dropout(self.embedding(context_ids), training=training)
        mask = self.embedding.compute_mask(context_ids)
        outputs, *states = self.encoder_rnn(embedded, mask=mask, training=training)
        return outputs, mask, states

    def decode(self, decoder_ids: tf.Tensor, states: list[tf.Tensor], encoder_outputs: tf.Tensor,
               encoder_mask: tf.Tensor, training: bool = False
               ) -> tuple[tf.Tensor, list[tf.Tensor]]:
        """[batch, steps] ids from ``states`` -> (logits [batch, steps, vocab], new states)."""
        embedded = self.dropout(self.embedding(decoder_ids), training=training)
        mask = self.embedding.compute_mask(decoder_ids)
        outputs, *states = self.decoder_rnn(embedded, mask=mask, initial_state=states,
                                            training=training)
        attended = self.attention([outputs, encoder_outputs], mask=[mask, encoder_mask])
        hidden = self.combine(tf.concat([outputs, attended], axis=-1))
        return self.logits(self.dropout(hidden, training=training)), states

    def call(self, inputs: dict[str, tf.Tensor], training: bool = False) -> tf.Tensor:
        encoder_outputs, encoder_mask, states = self.encode(inputs[features.CONTEXT_XF], training)
        logits, _ = self.decode(inputs[features.DECODER_INPUT_XF], states, encoder_outputs,
                                encoder_mask, training)
        return logits

    def next_token_logits(self, context_ids: tf.Tensor) -> tf.Tensor:
        """[batch, Lc] ids -> logits [batch, vocab] of the first target token (inference)."""
        encoder_outputs, encoder_mask, states = self.encode(context_ids)
        start = tf.fill([tf.shape(context_ids)[0], 1], tf.constant(features.START_ID, tf.int64))
        logits, _ = self.decode(start, states, encoder_outputs, encoder_mask)
        return logits[:, 0, :]


def build_seq2seq(vocab_size: int, context_tokens: int, target_tokens: int,
                  learning_rate: float = 3e-3, embedding_dim: int = 128, units: int = 256,
                  dropout: float = 0.5, cell: str = "lstm", jit_compile: bool = False,
                  lr_schedule: str = "constant", total_steps: int = 0, label_smoothing: float = 0.0) -> Seq2Seq:
    """Build (variables created) and compile the model; call inside ``strategy.scope()``.

    Loss and accuracy are per target token; padding is excluded through the sample
    weights that :func:`teacher_forcing` adds. ``lr_schedule`` "cosine" decays the
    learning rate to a tenth over ``total_steps`` (a candidate measured in
    benchmarks/seq2seq_quality.py, see benchmarks/README.md).
    """
    if lr_schedule not in LR_SCHEDULES:
        raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {lr_schedule!r}")
    if lr_schedule == "cosine" and total_steps > 0:
        learning_rate = tf.keras.optimizers.schedules.CosineDecay(learning_rate, total_steps, alpha=0.1)
    model = Seq2Seq(vocab_size, embedding_dim, units, dropout, cell, name="seq2seq")
    model({features.CONTEXT_XF: tf.zeros([1, context_tokens], tf.int64),
           features.DECODER_INPUT_XF: tf.ones([1, target_tokens], tf.int64)})
    model.compile(
        optimizer=tf.keras.optimizers.Adam(learning_rate, clipnorm=1.0),
        loss=SmoothedCrossEntropy(label_smoothing),
        weighted_metrics=[
            tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            tf.keras.metrics.SparseTopKCategoricalAccuracy(k=5, name="top5_accuracy"),
            FirstTokenTopK(k=5, name="next_token_top5"),
        ],
        jit_compile=jit_compile,
    )
    return model


class FirstTokenTopK(tf.keras.metrics.SparseTopKCategoricalAccuracy):
    """Top-k accuracy of the first target token only: what the Evaluator gates on and what
    generation repeats, so the epoch lines show the number the run will be judged by (the
    all-position metrics include easier teacher-forced tokens)."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        return super().update_state(y_true[:, 0], y_pred[:, 0],
                                    None if sample_weight is None else sample_weight[:, 0])


class SmoothedCrossEntropy(tf.keras.losses.Loss):
    """Per-target-token cross-entropy with ``label_smoothing`` of the probability mass spread
    over the vocabulary (tf-keras' sparse cross-entropy has no smoothing): exactly Keras'
    sparse cross-entropy at 0. Smoothing trades next-token top-5 for perplexity on the
    default corpus (benchmarks/README.md), so it is off by default.
    """

    def __init__(self, label_smoothing: float = 0.0, **kwargs):
        super().__init__(name="smoothed_cross_entropy", **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        log_probs = tf.nn.log_softmax(y_pred)
        ce = -tf.gather(log_probs, tf.cast(y_true, tf.int32), batch_dims=len(y_true.shape))
        if self.label_smoothing:
            ce = (1 - self.label_smoothing) * ce - self.label_smoothing * tf.reduce_mean(log_probs, axis=-1)
        return ce

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


def teacher_forcing(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``(features, target ids)`` batches -> ``(model inputs, target ids, non-pad weights)``."""

    def split(batch: dict[str, tf.Tensor], target: tf.Tensor):
        inputs = {k: batch[k] for k in (features.CONTEXT_XF, features.DECODER_INPUT_XF)}
        return inputs, target, tf.cast(tf.not_equal(target, features.PAD_ID), tf.float32)

    return dataset.map(split, num_parallel_calls=tf.data.AUTOTUNE)

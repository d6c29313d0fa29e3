"""What ``--tune-trials`` searches for the seq2seq model (models/common/search_space.py).

The knobs are ``trainer.MODEL_DEFAULTS`` keys (embedding size, units, dropout, cell) plus
the learning rate, a TrainingSettings value the Trainer applies. Kept apart from the trainer
so that the CLI can check a ``--hyperparameters`` file without loading TensorFlow.
"""
from models.common.search_space import Knob

LEARNING_RATE = "learning_rate"
SEARCH_SPACE = (
    Knob("units", "choice", default=256, values=(64, 128, 256)),
    Knob("embedding_dim", "choice", default=128, values=(64, 128)),
    Knob("dropout", "float", default=0.5, low=0.2, high=0.5, step=0.1),
    Knob(LEARNING_RATE, "float", default=3e-3, low=1e-3, high=1e-2, log=True),
    Knob("cell", "choice", default="lstm", values=("lstm", "gru")),
)

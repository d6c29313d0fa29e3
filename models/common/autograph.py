"""Keep AutoGraph out of tf_keras internals, as TensorFlow already does for ``keras``.

TF 2.16's AutoGraph rules skip the ``keras`` package but not ``tf_keras``, which is where
Keras 2 lives on this stack (``TF_USE_LEGACY_KERAS=1``). So the first ``fit`` of every
process transpiles hundreds of tf_keras functions, most of a small Trainer's time (see
benchmarks/README.md). tf_keras is the same Keras 2 code that ran unconverted as ``keras``
up to TF 2.15, so skipping it restores that behaviour; model code (``models.*``) is still
converted. The private AutoGraph hook itself lives in ``stackenv/compat.py``.
"""
from stackenv import compat

TF_KERAS = "tf_keras"


def convert_tf_keras(convert: bool) -> None:
    """False: AutoGraph leaves tf_keras as is (the project default, set by training).

    True restores TensorFlow's own rules; benchmarks use it to measure the difference.
    """
    compat.set_autograph_skip(TF_KERAS, skip=not convert)

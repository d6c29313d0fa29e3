"""Keep AutoGraph out of tf_keras internals, as TensorFlow already does for ``keras``.

TF 2.16's AutoGraph rules (``tensorflow/python/autograph/core/config.py``) skip the
``keras`` package but not ``tf_keras``, which is where Keras 2 lives on this stack
(``TF_USE_LEGACY_KERAS=1``). So the first ``fit`` of every process transpiles hundreds of
tf_keras functions: ~20 s of a ~30 s digits Trainer on 2 cores (benchmarks/README.md).
tf_keras is the same Keras 2 code that ran unconverted as ``keras`` up to TF 2.15, so
skipping it restores that behaviour; model code (``models.*``) is still converted.
"""
from tensorflow.python.autograph.core import config, config_lib  # no public API for this

TF_KERAS = "tf_keras"


def _is_tf_keras_rule(rule) -> bool:
    return isinstance(rule, config_lib.DoNotConvert) and getattr(rule, "_prefix", None) == TF_KERAS


def convert_tf_keras(convert: bool) -> None:
    """False: AutoGraph leaves tf_keras as is (the project default, set by training).

    True restores TensorFlow's own rules; benchmarks use it to measure the difference.
    """
    rules = tuple(r for r in config.CONVERSION_RULES if not _is_tf_keras_rule(r))
    config.CONVERSION_RULES = rules if convert else (config_lib.DoNotConvert(TF_KERAS),) + rules


def tf_keras_converted() -> bool:
    return not any(_is_tf_keras_rule(r) for r in config.CONVERSION_RULES)

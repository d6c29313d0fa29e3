"""``tensorflow_model_analysis`` with its configuration protos at the top level, on both stacks.

Import TFMA as ``from stackenv.tfma import tfma``. Hook TFMA_CONFIG_PROTOS (stackenv/compat.py):
TFMA 0.52 (the TFX 1.21 stack) still lists ``EvalConfig``, ``MetricConfig``, ``SlicingSpec`` ... in
the package's ``__all__``, but its ``sdk.py`` stopped importing them from ``proto/config_pb2``
(0.47 imports them there), so ``tfma.EvalConfig`` raises ``AttributeError``. The project, its
notebook and TFMA's own documentation spell them ``tfma.<Name>``; this puts back the names
``__all__`` promises, from the module that defines them on every version.
"""
from stackenv import compat

tfma = compat.tfma_with_config_protos()

__all__ = ["tfma"]

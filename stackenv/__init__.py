"""Process environment the TF/TFX stacks need, applied before TensorFlow loads.

Every package of this project imports this module first (``import stackenv``), so the
CLI, the tests, and the Trainer/Transform code that TFX imports by dotted path all get
the same settings, whichever of them happens to import TensorFlow first.

Why: TFT/TFMA (1.16 and 1.21 alike) only work with Keras 2 (tf-keras). TensorFlow picks the Keras
implementation when it is first imported, so ``TF_USE_LEGACY_KERAS=1`` must be set
before that; TFT sets it itself on import, but too late, leaving a silent mix of
Keras 3 in model code and Keras 2 inside TFT/TFMA.
"""
import os
import sys
import warnings
from importlib import metadata

os.environ["TF_USE_LEGACY_KERAS"] = "1"
# C++ INFO/WARNING lines (CPU feature notices, oneDNN hints) drown the pipeline's own log.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
# A fixed hash seed keeps Python-side ordering (sets, dict of sets) stable between runs.
os.environ.setdefault("PYTHONHASHSEED", "0")

# The Google Cloud clients TFX pulls in warn on every import that Python 3.10 is old;
# 3.10 is the newest Python TFX 1.16 supports, so the warning helps nobody here.
warnings.filterwarnings("ignore", message="You are using a non-supported Python version",
                        category=FutureWarning)
warnings.filterwarnings("ignore", message="Support for google-cloud-storage < 3.0.0",
                        category=FutureWarning)

if "tensorflow" in sys.modules and "tf_keras" not in sys.modules:
    warnings.warn(
        "TensorFlow was imported before stackenv; if Keras 3 got loaded, TFT/TFMA will "
        "fail. Import this project's packages before tensorflow, or export "
        "TF_USE_LEGACY_KERAS=1 in the shell.",
        RuntimeWarning,
        stacklevel=2,
    )

# Any bytes a file name holds can be written as text by every writer that says so (stackenv/text_out.py).
from stackenv import text_out  # noqa: E402,F401


def stack() -> str:
    """The stack installed here, as ``make setup`` names it (``tfx-1.16``, ``tfx-1.21``): TFX's
    major.minor, read from the package metadata (no TensorFlow import)."""
    major, minor = metadata.version("tfx").split(".")[:2]
    return f"tfx-{major}.{minor}"

"""models."""
import stackenv  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)

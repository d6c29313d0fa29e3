"""Transfer learning from a pretrained image feature extractor, the TF Hub way.

``--base-model`` takes a TF Hub handle or URL, or a local directory holding a SavedModel /
TF Hub module that maps float images ``[batch, H, W, 3]`` in [0, 1] (TF Hub's convention for
image modules) to feature vectors ``[batch, D]``. The CNN family puts a new softmax head on
it (hub.KerasLayer), resizes images to the module's input size, and exports ONE SavedModel
that contains the module's variables, so serving needs nothing else.

Handles are resolved by tensorflow_hub where the Trainer runs (inside the cluster on
Kubeflow); ``TFHUB_CACHE_DIR`` points it at a cache, e.g. a mounted volume holding the
module for an air-gapped cluster. Nothing here downloads unless a remote handle is given.
:func:`describe` checks a module before any training and says in one paragraph what is
wrong with it.
"""
import dataclasses
import os

from stackenv.errors import ProjectError

REMOTE_PREFIXES = ("http://", "https://", "gs://", "s3://")


class BaseModelError(ProjectError, ValueError):
    """The --base-model is missing, unreadable or not an image feature extractor (one paragraph)."""


@dataclasses.dataclass(frozen=True)
class BaseModelInfo:
    handle: str
    height: int
    width: int
    channels: int
    features: int


def is_remote(handle: str) -> bool:
    return handle.startswith(REMOTE_PREFIXES)


def _input_shape(module) -> tuple | None:
    """[batch, H, W, C] from the module's call signature (None dims allowed), if it has one."""
    call = getattr(module, "__call__", None)  # noqa: B004 - its concrete functions, not callability
    functions = list(getattr(call, "concrete_functions", None) or [])
    for function in functions:
        args = function.structured_input_signature[0]
        if args and hasattr(args[0], "shape") and args[0].shape.rank == 4:
            return tuple(args[0].shape.as_list())
    serving = getattr(module, "signatures", {}).get("serving_default")
    if serving is not None:
        specs = list(serving.structured_input_signature[1].values())
        if len(specs) == 1 and specs[0].shape.rank == 4:
            return tuple(specs[0].shape.as_list())
    return None


def describe(handle: str, default_size: int = 224) -> BaseModelInfo:
    """Load the module and check it maps [1, H, W, 3] images to [1, D] features."""
    import tensorflow as tf

    hub = import_hub()
    if not is_remote(handle) and not os.path.isdir(handle):  # TF Hub handles are URLs
        raise BaseModelError(_missing(handle))
    try:
        module = hub.load(handle)
    except Exception as error:  # noqa: BLE001 - any load failure is the same user-facing problem
        where = "could not be reached or read" if is_remote(handle) else "is not a readable SavedModel"
        raise BaseModelError(
            f"--base-model {handle} {where} ({type(error).__name__}: {str(error).splitlines()[0][:200]}). "
            "Pass a TF Hub handle or URL of an image feature-vector module, or a local directory with a "
            "SavedModel of one; on a cluster without internet access, put the module under "
            "TFHUB_CACHE_DIR or mount it and pass its path.") from error
    shape = _input_shape(module)
    if shape is not None and (len(shape) != 4 or shape[-1] not in (None, 3)):
        raise BaseModelError(_not_extractor(handle, f"it takes inputs of shape {list(shape)}"))
    height = int(shape[1]) if shape and shape[1] else default_size
    width = int(shape[2]) if shape and shape[2] else default_size
    try:
        out = module(tf.zeros([1, height, width, 3], tf.float32))
    except Exception as error:  # noqa: BLE001
        raise BaseModelError(_not_extractor(
            handle, f"calling it on a [1, {height}, {width}, 3] image failed ({type(error).__name__})")) from error
    if isinstance(out, dict) or not hasattr(out, "shape") or out.shape.rank != 2:
        shape_text = {k: v.shape.as_list() for k, v in out.items()} if isinstance(out, dict) else \
            getattr(out, "shape", type(out).__name__)
        raise BaseModelError(_not_extractor(handle, f"it returns {shape_text}, not a [batch, features] vector"))
    return BaseModelInfo(handle, height, width, 3, int(out.shape[1]))


def _missing(handle: str) -> str:
    return (f"--base-model {handle} does not exist. Pass a local directory holding a SavedModel of an "
            "image feature extractor (images [batch, H, W, 3] in [0, 1] -> features [batch, D]), or a "
            "TF Hub handle or URL such as https://tfhub.dev/google/imagenet/mobilenet_v2_100_224/feature_vector/5.")


def _not_extractor(handle: str, why: str) -> str:
    return (f"--base-model {handle} is not an image feature extractor: {why}. The module must map float "
            "images [batch, H, W, 3] in [0, 1] to feature vectors [batch, D], as TF Hub's "
            "image feature_vector modules do; classification modules and text models do not fit.")


def import_hub():
    """``tensorflow_hub``, importable under TF 2.16 (see stackenv.compat.import_tensorflow_hub)."""
    from stackenv import compat

    return compat.import_tensorflow_hub()


def feature_extractor(info: BaseModelInfo, trainable: bool = False):
    """The module as a Keras layer (its variables become the model's, so they are exported)."""
    hub = import_hub()

    return hub.KerasLayer(info.handle, trainable=trainable, name="base_model")

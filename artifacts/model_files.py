"""What a SavedModel's variables hold, read from its checkpoint without loading its graph.

Why: a diverged training run can export a model whose weights hold nan or inf while its
metrics look finite (TFMA compares a nan metric against a threshold as "not below it"),
and a truncated copy fails deep inside ``tf.saved_model.load`` with an ``IndexError``
("Read less bytes than requested"). Reading the checkpoint in ``variables/`` answers both
questions for the Pusher, the Evaluator's baseline and ``predict`` in one place, at the
cost of reading the weights once (no graph, no function tracing).
"""
from __future__ import annotations

import os

from stackenv.errors import ProjectError

import numpy as np
import tensorflow as tf

#: Checkpoint entries that are bookkeeping, not model values.
_NOT_VALUES = ("_CHECKPOINTABLE_OBJECT_GRAPH",)
#: The errors a damaged checkpoint raises while being read (IndexError: a truncated data file).
READ_ERRORS = (tf.errors.OpError, OSError, ValueError, IndexError)


class DamagedModel(ProjectError):
    """A SavedModel's files cannot be read (truncated or corrupt)."""


def _checkpoint_prefix(saved_model_dir: str) -> str | None:
    prefix = os.path.join(saved_model_dir, "variables", "variables")
    return prefix if tf.io.gfile.exists(prefix + ".index") else None


def _has_variables(proto) -> bool:
    """The SavedModel's graph holds variables (so it cannot load without a variables/ checkpoint)."""
    meta_graph = proto.meta_graphs[0]
    if any(node.WhichOneof("kind") == "variable" for node in meta_graph.object_graph_def.nodes):
        return True
    return any(node.op in ("VarHandleOp", "VariableV2") for node in meta_graph.graph_def.node)


def non_finite_variables(saved_model_dir: str) -> list[str]:
    """Names of the floating-point variables holding a nan or an infinity, sorted.

    DamagedModel when the checkpoint cannot be read. A model without variables has none.
    """
    prefix = _checkpoint_prefix(saved_model_dir)
    if prefix is None:
        return []
    try:
        reader = tf.train.load_checkpoint(prefix)
        bad = []
        for name, dtype in sorted(reader.get_variable_to_dtype_map().items()):
            value = reader.get_tensor(name)  # every entry: a truncation anywhere shows here
            if name in _NOT_VALUES or not (dtype.is_floating or dtype.is_complex):
                continue
            if not np.all(np.isfinite(value)):
                bad.append(name.replace("/.ATTRIBUTES/VARIABLE_VALUE", ""))
        return bad
    except READ_ERRORS as error:
        raise damaged(saved_model_dir, error) from error


def damaged(saved_model_dir: str, error: BaseException) -> DamagedModel:
    """The paragraph for a SavedModel whose files fail to read or load."""
    first = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")[:300]
    return DamagedModel(
        f"Cannot load the SavedModel in {saved_model_dir}: {type(error).__name__}: {first}. The model "
        "files are damaged or incomplete (e.g. a truncated copy); TF Serving cannot load them either. "
        "Copy the model again, roll back to the previous version (python -m pipeline rollback "
        "--serving-dir <its parent>) or run the pipeline again to push a new one.")


def version_problem(saved_model_dir: str) -> str | None:
    """Why TF Serving could not load this SavedModel, in a few words, else None (cheap: no graph load).

    ``saved_model.pb`` must parse as a SavedModel holding a MetaGraph, and the variables' checkpoint
    must read whole with finite values (``models`` checks each listed version this way).
    """
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(saved_model_dir, "saved_model.pb")
    try:
        with tf.io.gfile.GFile(path, "rb") as handle:
            data = handle.read()
    except (tf.errors.OpError, OSError) as error:
        return f"saved_model.pb cannot be read ({type(error).__name__})"
    proto = saved_model_pb2.SavedModel()
    try:
        proto.ParseFromString(data)
    except Exception as error:  # protobuf's DecodeError (its type differs by protobuf backend)
        return f"saved_model.pb ({len(data)} bytes) does not parse as a SavedModel ({type(error).__name__})"
    if not proto.meta_graphs:
        return f"saved_model.pb ({len(data)} bytes) holds no MetaGraph"
    if _checkpoint_prefix(saved_model_dir) is None and _has_variables(proto):
        return "its variables/ folder (the trained weights the graph reads) is missing or empty"
    try:
        bad = non_finite_variables(saved_model_dir)
    except DamagedModel:
        return "its variables cannot be read (truncated or corrupt)"
    if bad:
        return f"{len(bad)} variable(s) hold nan or inf (e.g. {bad[0]})"
    return None

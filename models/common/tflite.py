"""TFLite conversion of one serving signature, and running it with TensorFlow's interpreter.

Why a signature of the exported SavedModel, not the Keras model: the signature is what TF
Serving runs (transform graph, kernel head and class names included), so a TFLite model
converted from it answers the same question, and checking the two against each other
checks the conversion, nothing else.

Quantizations (post-training, no retraining):
- ``float16``: weights stored as float16 (about half the size), computed in float32.
- ``int8``: weights and activations int8, calibrated on a representative sample; inputs
  and outputs stay float32, so both files are called the same way.
Model code: knows nothing of where the samples come from or what agreement is enough.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence

import numpy as np
import tensorflow as tf

FLOAT16 = "float16"
INT8 = "int8"
QUANTIZATIONS = (FLOAT16, INT8)


@dataclasses.dataclass(frozen=True)
class TfliteSpec:
    """What a family converts: one signature with one array input, and how to feed it.

    ``examples``: raw serialized tf.Examples (the ExampleGen's) and the signature's input
    shape without the batch dimension -> (inputs [N, ...], class ids [N]).
    """

    signature: str
    input_name: str
    probabilities: str
    examples: Callable[[Sequence[bytes], Sequence[int]], tuple[np.ndarray, np.ndarray]]


def convert(saved_model_dir: str, signature: str, quantization: str,
            representative: Iterable[np.ndarray] = ()) -> bytes:
    """The TFLite flatbuffer of ``signature`` at ``quantization`` (int8 needs ``representative``:
    single inputs without the batch dimension)."""
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, not {quantization!r}")
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir, signature_keys=[signature])
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == FLOAT16:
        converter.target_spec.supported_types = [tf.float16]
    else:
        samples = [np.asarray(x, np.float32)[None] for x in representative]
        if not samples:
            raise ValueError("int8 quantization needs representative inputs to calibrate on")
        converter.representative_dataset = lambda: ([x] for x in samples)
    return converter.convert()


#: A TFLite flatbuffer's file identifier (bytes 4-8), from TFLite's schema.fbs (``file_identifier "TFL3"``).
FILE_IDENTIFIER = b"TFL3"


def flatbuffer_problem(data: bytes) -> str | None:
    """Why ``data`` is not a whole TFLite model, else None: checked in Python before the native interpreter
    sees it, which reads a truncated or corrupt flatbuffer without bounds checks (a SIGSEGV, nothing printed).

    The header's identifier, then every table and vector unpacked (Python's flatbuffers reader bounds-checks
    each read, so an offset past the end raises), then each buffer stored outside the flatbuffer in range.
    """
    from tensorflow.lite.python import schema_py_generated as schema

    if len(data) < 8:
        return f"{len(data)} bytes, shorter than a TFLite header"
    if data[4:8] != FILE_IDENTIFIER:
        return f"no TFLite identifier ({FILE_IDENTIFIER.decode()}) at byte 4"
    try:
        model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as error:  # struct.error, IndexError, ValueError from a read past the end
        return f"the flatbuffer does not unpack ({type(error).__name__}: {str(error)[:120]}): truncated or corrupt"
    if not model.subgraphs:
        return "the flatbuffer holds no subgraph"
    for index, buffer in enumerate(model.buffers or []):
        offset, size = int(buffer.offset or 0), int(buffer.size or 0)
        if offset > 1 and offset + size > len(data):
            return f"buffer {index} lies past the end of the file (bytes {offset}-{offset + size} of {len(data)})"
    return None


class DamagedTflite(ValueError):
    """A TFLite file that would crash the native interpreter (``flatbuffer_problem``)."""


def interpreter(model: bytes | str) -> tf.lite.Interpreter:
    """TensorFlow's own TFLite interpreter on a flatbuffer (bytes) or a .tflite path, after
    ``flatbuffer_problem`` (DamagedTflite) so a damaged file never reaches native code."""
    if isinstance(model, str):
        with tf.io.gfile.GFile(model, "rb") as handle:
            content: bytes = handle.read()
    else:
        content = model
    problem = flatbuffer_problem(content)
    if problem:
        raise DamagedTflite(problem)
    return tf.lite.Interpreter(model_content=content)


def run(model: bytes | str | tf.lite.Interpreter, signature: str, inputs: dict[str, np.ndarray],
        batch_size: int = 256) -> dict[str, np.ndarray]:
    """The signature's outputs on ``inputs``, in batches (the runner resizes the batch dimension)."""
    runner = (model if isinstance(model, tf.lite.Interpreter) else interpreter(model)).get_signature_runner(signature)
    total = len(next(iter(inputs.values())))
    parts: dict[str, list[np.ndarray]] = {}
    for start in range(0, total, batch_size):
        batch = {name: value[start:start + batch_size] for name, value in inputs.items()}
        for name, value in runner(**batch).items():
            parts.setdefault(name, []).append(np.asarray(value))
    return {name: np.concatenate(values) for name, values in parts.items()}


def input_shape(model: bytes | str | tf.lite.Interpreter, signature: str, input_name: str) -> tuple[int, ...]:
    """The signature input's shape without the batch dimension."""
    loaded = model if isinstance(model, tf.lite.Interpreter) else interpreter(model)
    details = loaded.get_signature_runner(signature).get_input_details()[input_name]
    return tuple(int(v) for v in details["shape"][1:])

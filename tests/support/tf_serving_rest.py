"""TF Serving's REST predict API, emulated in process over a loaded SavedModel.

TF Serving's binary cannot be installed here, so tests stop at its boundary: requests are
built in its documented JSON "row" form (``{"signature_name": ..., "instances": [...]}``,
binary strings as ``{"b64": ...}``), converted to tensors by its rules, sent through the
exported signature, and answered as ``{"predictions": [...]}``. The columnar form
(``{"signature_name": ..., "inputs": {name: value, ...}}``, needed for scalar inputs) is
answered as ``{"outputs": value}`` for one output, else ``{"outputs": {name: value}}``
(tensorflow_serving/util/json_tensor.cc: FillPredictRequestFromJson, MakeJsonFromTensors).
"""
import base64
import json
from typing import Any

import numpy as np
import tensorflow as tf


def _decode_b64(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"b64"}:
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decode_b64(v) for v in value]
    return value


def _jsonable(value: Any) -> Any:
    """Strings as UTF-8 text, numbers as JSON numbers, as TF Serving answers."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray) and value.dtype.kind in ("S", "O"):
        return [_jsonable(v) for v in value]
    return value.tolist() if isinstance(value, (np.ndarray, np.generic)) else value


def predict(saved_model, body: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(body))  # exactly what survives the wire
    signature = saved_model.signatures[body.get("signature_name", "serving_default")]
    specs = signature.structured_input_signature[1]
    if "inputs" in body:
        return _predict_columnar(signature, specs, body["inputs"])
    instances = body["instances"]
    if len(specs) == 1:
        (name,) = specs
        rows = [inst[name] if isinstance(inst, dict) and name in inst else inst for inst in instances]
        columns = {name: rows}
    else:
        columns = {name: [inst[name] for inst in instances] for name in specs}
    tensors = {name: tf.constant(_decode_b64(rows), dtype=specs[name].dtype) for name, rows in columns.items()}
    outputs = {k: v.numpy() for k, v in signature(**tensors).items()}
    if len(outputs) == 1:
        (values,) = outputs.values()
        return {"predictions": [_jsonable(v) for v in values]}
    return {"predictions": [{k: _jsonable(v[i]) for k, v in outputs.items()}
                            for i in range(len(instances))]}


def _predict_columnar(signature, specs, inputs: Any) -> dict[str, Any]:
    if not isinstance(inputs, dict):  # one unnamed input
        (name,) = specs
        inputs = {name: inputs}
    missing = set(specs) - set(inputs)
    if missing:  # TF Serving rejects a request that does not feed every input
        raise ValueError(f"Missing inputs {sorted(missing)}")
    tensors = {name: tf.constant(_decode_b64(value), dtype=specs[name].dtype) for name, value in inputs.items()}
    outputs = {k: _jsonable(v.numpy()) for k, v in signature(**tensors).items()}
    if len(outputs) == 1:
        (values,) = outputs.values()
        return {"outputs": values}
    return {"outputs": outputs}

"""TFLite models of a version being pushed, each written only after it agrees with the SavedModel.

Runs inside the Pusher's executor (components/pusher.py), after the blessing and before the
staged version is renamed into place, so a version either has its checked TFLite files or
none, and only pushed models pay for a conversion. The family says what converts
(``models.common.tflite.TfliteSpec``); this module decides on what data and how well:

- the check: the SavedModel's signature and the TFLite model on a sample of the eval split
  (the ExampleGen's raw examples: what a client sends), argmax compared row by row;
- int8 is calibrated on a seeded sample of the train split;
- a model below its agreement floor is not written; the record says why. A failure of the
  conversion itself is recorded the same way: the SavedModel is what TF Serving serves, so
  its push goes ahead.

The record (returned, stored under ``tflite`` in push_info.json) feeds the run summary, the
model card and ``predict --tflite``'s error message.
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf

from artifacts.serving_dir import copy_tree, tflite_file
from models.common import tflite

log = logging.getLogger(__name__)

#: Least argmax agreement with the SavedModel for a TFLite model to be written. float16 only
#: rounds weights: anything below 99 % is a broken conversion. int8 also rounds activations,
#: so borderline examples may flip; below 95 % it is a different model, not a smaller one.
MIN_AGREEMENT = {tflite.FLOAT16: 0.99, tflite.INT8: 0.95}
EVAL_SAMPLE = 5000          # eval examples the check runs on, at most
CALIBRATION_SAMPLE = 300    # train examples int8 is calibrated on
SEED = 0
READ_BATCH = 1024           # records read per step of tf.data's iterator by ``sample_examples``


def _split_files(examples_uri: str, split: str) -> list[str]:
    return sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))


def _file_batches(files: list[str]) -> tf.data.Dataset:
    """(file index, a batch of ``READ_BATCH`` records) over ``files``, the files read side by side (one reader
    each, on as many cores as there are files), their batches in turn: decompressing the records is most of a
    sample's time, and the ExampleGen writes a split as several files. Interleaving batches, not records,
    keeps tf.data's cost per record small."""
    names = tf.data.Dataset.from_tensor_slices((tf.range(len(files), dtype=tf.int64), files))
    return names.interleave(
        lambda index, name: tf.data.TFRecordDataset(name, compression_type="GZIP").batch(READ_BATCH).map(
            lambda batch: (index, batch)),
        cycle_length=len(files), num_parallel_calls=len(files), deterministic=True)


def sample_examples(examples_uri: str, split: str, limit: int, seed: int = SEED) -> list[bytes]:
    """Up to ``limit`` serialized examples of a split, a seeded uniform sample, in file order.

    Each record draws a seeded random key (one stream per file) and the ``limit`` smallest keys are kept (a
    sample without replacement, every subset of ``limit`` equally likely), decided with numpy a batch at a
    time: the Python step per record of a reservoir was a good part of the Pusher's time on a large train
    split, read whole for a few hundred calibration examples. The sample does not depend on where the
    batches end or in which order the files' batches arrive."""
    files = _split_files(examples_uri, split)
    if not files:
        raise FileNotFoundError(f"no Split-{split} files in {examples_uri}")
    if limit <= 0:
        return []
    streams = [np.random.default_rng([seed, index]) for index in range(len(files))]
    read = [0] * len(files)
    kept_keys = np.empty(0)
    kept: list[tuple[int, int, bytes]] = []   # (file, record in the file, record)
    for file, batch in _file_batches(files).as_numpy_iterator():
        keys = streams[file].random(len(batch))
        candidates = np.flatnonzero(keys < kept_keys.max()) if len(kept) >= limit else np.arange(len(batch))
        if candidates.size:
            keys_now = np.concatenate([kept_keys, keys[candidates]])
            items = kept + [(int(file), read[file] + int(i), batch[i]) for i in candidates]
            smallest = np.argsort(keys_now, kind="stable")[:limit]
            kept_keys, kept = keys_now[smallest], [items[i] for i in smallest]
        read[file] += len(batch)
    return [record for _, _, record in sorted(kept)]


def saved_model_bytes(saved_model_dir: str) -> int:
    """Size of what TF Serving loads: the graph and the variables (not warm-up requests or records)."""
    files = [os.path.join(saved_model_dir, "saved_model.pb")]
    files += tf.io.gfile.glob(os.path.join(saved_model_dir, "variables", "*"))
    return sum(tf.io.gfile.stat(path).length for path in files if tf.io.gfile.exists(path))


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0][:300]


def export_tflite(spec: tflite.TfliteSpec, saved_model_dir: str, examples_uri: str, out_dir: str) -> dict[str, Any]:
    """Convert, check and write ``tflite/model_<quantization>.tflite`` under ``out_dir``; the record."""
    eval_raw = sample_examples(examples_uri, "eval", EVAL_SAMPLE)
    calibration_raw = sample_examples(examples_uri, "train", CALIBRATION_SAMPLE)
    signature = tf.saved_model.load(saved_model_dir).signatures[spec.signature]
    shape = tuple(int(v) for v in signature.structured_input_signature[1][spec.input_name].shape[1:])
    inputs, labels = spec.examples(eval_raw, shape)
    calibration, _ = spec.examples(calibration_raw, shape)
    reference = np.concatenate([
        signature(**{spec.input_name: tf.constant(inputs[start:start + 256])})[spec.probabilities].numpy()
        for start in range(0, len(inputs), 256)]).argmax(-1)
    record: dict[str, Any] = {
        "signature": spec.signature, "eval_examples": int(len(labels)),
        "calibration_examples": int(len(calibration)),
        "saved_model": {"bytes": saved_model_bytes(saved_model_dir),
                        "accuracy": float(np.mean(reference == labels))},
    }
    with tempfile.TemporaryDirectory(prefix="tflite-source-") as local:
        if "://" in saved_model_dir:  # the converter holds the GIL while TensorFlow's threads read the model:
            copy_tree(saved_model_dir, local)  # stackenv/s3_filesystem needs the GIL for each read (tfx-1.21)
            saved_model_dir = local
        for quantization in tflite.QUANTIZATIONS:
            record[quantization] = _convert_and_check(spec, saved_model_dir, quantization, calibration, inputs,
                                                      reference, labels, out_dir)
    return record


def _convert_and_check(spec: tflite.TfliteSpec, saved_model_dir: str, quantization: str, calibration: np.ndarray,
                       inputs: np.ndarray, reference: np.ndarray, labels: np.ndarray, out_dir: str) -> dict[str, Any]:
    floor = MIN_AGREEMENT[quantization]
    try:
        flatbuffer = tflite.convert(saved_model_dir, spec.signature, quantization, calibration)
        predicted = tflite.run(flatbuffer, spec.signature, {spec.input_name: inputs})[spec.probabilities].argmax(-1)
    except Exception as error:  # noqa: BLE001 - recorded and shown; the SavedModel's push goes ahead
        log.warning("TFLite %s conversion failed: %s", quantization, error)
        return {"written": False, "min_agreement": floor, "why": f"conversion failed: {_first_line(error)}"}
    entry: dict[str, Any] = {"bytes": len(flatbuffer), "agreement": float(np.mean(predicted == reference)),
             "accuracy": float(np.mean(predicted == labels)), "min_agreement": floor}
    if entry["agreement"] < floor:
        entry.update(written=False, why=f"agrees with the SavedModel on {entry['agreement']:.1%} of "
                                        f"{len(labels)} eval examples, below the {floor:.0%} required")
        log.warning("TFLite %s not written: %s", quantization, entry["why"])
        return entry
    path = os.path.join(out_dir, tflite_file(quantization))
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "wb") as handle:
        handle.write(flatbuffer)
    entry.update(written=True, file=tflite_file(quantization))
    return entry

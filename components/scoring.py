"""Batch scoring inside the pipeline (``run --score DIR``): an ExampleGen of the unlabeled folder,
TFX's BulkInferrer (added by pipeline/graph.py), and a writer of its predictions as CSV and Parquet.

What TFX 1.16's BulkInferrer needs and gives (``tfx/components/bulk_inferrer/component.py`` and
``executor.py`` in the venv): ``examples`` (an Examples artifact; every split, or those in
``DataSpec.example_splits``, read as raw records and parsed as ``tf.train.Example``), ``model`` and
an optional ``model_blessing``: when that blessing is not blessed, ``Executor.Do`` logs "Model on
... was not blessed" and returns, so its ``inference_result`` (an ``InferenceResult`` artifact) is
published empty. Otherwise tfx_bsl's RunInference calls the SavedModel's signature
(``ModelSpec.model_signature_name``, default ``serving_default``; here the family's
``Scoring.signature``: serialized Examples in, the family's outputs out, a string output at least
[batch, 1], since ``tfx_bsl/beam/run_inference.py`` ``_PredictModelHandler._post_process`` reads
``.dtype`` of each example's piece of an output) and writes one ``PredictionLog`` per example to
``<inference_result>/prediction_logs-*.gz`` (GZIP TFRecords), in no particular order; the request
inside each log holds the example, so its ``example_id`` names the scored file.

:class:`ScoringExampleGen` lists the folder and reads each file with the family's reader
(``data/scoring.py``: the training decoders), writing one example per readable file (split
``score``) and ``inputs.json``: every file in listing order with why it could not be read, if so.
:class:`ScoreWriter` joins the logs back to that list: one row per input file, in listing order,
``scores.csv`` and ``scores.parquet``; an unreadable file is a row with its reason and no
prediction (rows out = files in), a readable one without a prediction is a pipeline bug and
stops the step. The files are read in one process, one after another: a scoring folder is
expected to be a batch of thousands, not the training set's millions.
"""
from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
from typing import Any

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

import tensorflow as tf
from tfx import types
from tfx.dsl.components.base import base_component, base_executor, executor_spec
from tfx.types import artifact_utils, standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.data_facts import facts_of, with_facts
from data.scoring import EXAMPLE_ID, UnreadableInput, list_inputs

SCORE_SPLIT = "score"
INPUTS_FILE = "inputs.json"
CSV_FILE, PARQUET_FILE, RECORD_FILE = "scores.csv", "scores.parquet", "scores.json"
#: Custom properties of the Scores artifact (read by pipeline/results/score_summary.py).
ROWS, SCORED, UNREADABLE, NOT_SCORED_REASON = "rows", "scored", "unreadable", "not_scored_reason"
COLUMNS = ("file", "prediction", "score", "scores", "error")


class Scores(types.Artifact):
    """The predictions of a ``--score`` folder: scores.csv, scores.parquet and scores.json."""

    # namespace.Name: what TFX's Kubeflow V2 compiler accepts for a custom type's schema title
    # (tfx/orchestration/kubeflow/v2/compiler_utils.py, _SCHEMA_TITLE_RE).
    TYPE_NAME = "tfxproject.Scores"


class LostPrediction(ProjectError):
    """A readable scoring input came back from the BulkInferrer without a prediction (a pipeline bug)."""

    exit_code = EXIT_PIPELINE_FAILED


def listing_key(score_dir: str) -> str:
    """What makes the scoring ExampleGen's cache key follow the folder: a local folder's listing
    (names, sizes, mtimes: ``ingest_config.tree_fingerprint``, stat only), so unchanged files are
    cached; for a bucket URI the time, since listing a bucket while building the graph would reach
    the network at compile time (on Kubeflow the step is never cached: pipeline/kubeflow/fresh_data.py)."""
    import time

    from components.ingest_config import tree_fingerprint
    from data.walk import is_uri

    return f"built {time.time_ns()}" if is_uri(score_dir) else tree_fingerprint(score_dir)


def _load(dotted: str):
    import importlib

    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


class ScoringExampleGenSpec(ComponentSpec):
    PARAMETERS = {
        "score_dir": ExecutionParameter(type=str),
        "reader": ExecutionParameter(type=str),          # dotted (uri, relative, settings) -> serialized Example
        "reader_config": ExecutionParameter(type=str),   # JSON; the data's facts added from training_examples
    }
    INPUTS = {"training_examples": ChannelParameter(type=standard_artifacts.Examples)}
    OUTPUTS = {"examples": ChannelParameter(type=standard_artifacts.Examples)}


class ScoringExampleGenExecutor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        from tfx.components.util import examples_utils
        from tfx.proto import example_gen_pb2

        training = artifact_utils.get_single_instance(input_dict["training_examples"])
        settings = with_facts(json.loads(exec_properties["reader_config"]), facts_of(training))
        reader = _load(exec_properties["reader"])
        root = exec_properties["score_dir"].rstrip("/") or "/"
        files, problems = list_inputs(root, bool(settings.get("follow_links")))
        inputs: list[dict[str, Any]] = [{"file": p.relative, "error": f"not a regular file: {p.detail or p.reason}"}
                                        for p in problems]
        examples = artifact_utils.get_single_instance(output_dict["examples"])
        examples.split_names = artifact_utils.encode_split_names([SCORE_SPLIT])
        examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        split_dir = artifact_utils.get_split_uri([examples], SCORE_SPLIT)
        tf.io.gfile.makedirs(split_dir)
        with tf.io.TFRecordWriter(f"{split_dir}/data_tfrecord-00000-of-00001.gz", options="GZIP") as out:
            for file in files:
                try:
                    out.write(reader(file.uri, file.relative, settings))
                    renamed = {"not_utf8": True} if file.not_utf8 else {}  # named in the summary
                    inputs.append({"file": file.relative, "error": None, **renamed})
                except UnreadableInput as error:
                    inputs.append({"file": file.relative, "error": str(error)})
        inputs.sort(key=lambda row: row["file"])
        with tf.io.gfile.GFile(f"{examples.uri}/{INPUTS_FILE}", "w") as handle:
            json.dump({"root": root, "inputs": inputs}, handle, indent=1)
        logging.info("Scoring inputs: %d files below %s, %d unreadable", len(inputs), root,
                     sum(1 for row in inputs if row["error"]))


class ScoringExampleGen(base_component.BaseComponent):
    """The ``--score`` folder as Examples (split ``score``), one per readable file, and the list of all."""

    SPEC_CLASS = ScoringExampleGenSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(ScoringExampleGenExecutor)

    def __init__(self, score_dir: str, reader: str, reader_config: dict, training_examples):
        super().__init__(spec=ScoringExampleGenSpec(
            score_dir=score_dir, reader=reader, reader_config=json.dumps(reader_config, sort_keys=True),
            training_examples=training_examples, examples=types.Channel(type=standard_artifacts.Examples)))


class ScoreWriterSpec(ComponentSpec):
    PARAMETERS = {
        "prediction_output": ExecutionParameter(type=str),   # serving_default output: first value = the prediction
        "score_output": ExecutionParameter(type=str),        # serving_default output: its values = the scores
    }
    INPUTS = {
        "inference_result": ChannelParameter(type=standard_artifacts.InferenceResult),
        "examples": ChannelParameter(type=standard_artifacts.Examples),
        "model_blessing": ChannelParameter(type=standard_artifacts.ModelBlessing),
    }
    OUTPUTS = {"scores": ChannelParameter(type=Scores)}


def read_prediction_logs(uri: str, prediction_output: str, score_output: str) -> dict[str, tuple[str, list[float]]]:
    """``example_id -> (prediction, scores)`` from the BulkInferrer's PredictionLogs under ``uri``."""
    from tensorflow_serving.apis import prediction_log_pb2

    found: dict[str, tuple[str, list[float]]] = {}
    paths = tf.io.gfile.glob(f"{uri.rstrip('/')}/prediction_logs*")
    for record in (tf.data.TFRecordDataset(paths, compression_type="GZIP") if paths else []):
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        predict = log.predict_log
        (request,) = predict.request.inputs.values()
        serialized = tf.make_ndarray(request).reshape(-1)
        outputs = {name: tf.make_ndarray(predict.response.outputs[name]) for name in (prediction_output, score_output)}
        for i, example in enumerate(serialized):
            parsed = tf.train.Example.FromString(example).features.feature[EXAMPLE_ID].bytes_list.value[0].decode()
            prediction = outputs[prediction_output][i].reshape(-1)[0]
            found[parsed] = (prediction.decode() if isinstance(prediction, bytes) else str(prediction),
                             [float(v) for v in outputs[score_output][i].reshape(-1)])
    return found


def score_rows(inputs: list[dict[str, Any]], predictions: dict[str, tuple[str, list[float]]]) -> list[dict[str, Any]]:
    """One row per input file, in the inputs' order; LostPrediction when a readable file has none."""
    rows = []
    for entry in inputs:
        if entry["error"]:
            rows.append({"file": entry["file"], "prediction": None, "score": None, "scores": [],
                         "error": entry["error"]})
            continue
        if entry["file"] not in predictions:
            raise LostPrediction(f"The BulkInferrer returned no prediction for {entry['file']}, which was read "
                                 "and handed to it; predictions were lost. Re-run with --no-cache and report this.")
        prediction, scores = predictions[entry["file"]]
        rows.append({"file": entry["file"], "prediction": prediction, "score": max(scores) if scores else None,
                     "scores": scores, "error": None})
    return rows


#: What a spreadsheet reads as the start of a formula (OWASP, "CSV Injection"): = + - @, tab, carriage return.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A text cell a spreadsheet shows as text: one starting like a formula gets a leading ``'`` (OWASP's
    rule; the csv module then quotes it and doubles any ``"``). Parquet keeps the value as it is."""
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def write_tables(rows: list[dict[str, Any]], uri: str) -> None:
    """``scores.csv`` (``scores`` as a JSON list; text cells through ``csv_cell``) and ``scores.parquet``
    (``scores`` as list<double>, text as it is)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    with tf.io.gfile.GFile(f"{uri}/{CSV_FILE}", "w") as handle:
        # RFC 4180 line ends: the csv module then quotes a cell holding a CR or LF (a file name may), so it
        # stays one cell; with "\n" alone a lone CR went unquoted and split the row.
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, lineterminator="\r\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "file": csv_cell(row["file"]), "scores": json.dumps(row["scores"]),
                             "score": "" if row["score"] is None else f"{row['score']:.6g}",
                             "prediction": csv_cell(row["prediction"] or ""), "error": csv_cell(row["error"] or "")})
    table = pa.table({
        "file": pa.array([r["file"] for r in rows], pa.string()),
        "prediction": pa.array([r["prediction"] for r in rows], pa.string()),
        "score": pa.array([r["score"] for r in rows], pa.float64()),
        "scores": pa.array([r["scores"] for r in rows], pa.list_(pa.float64())),
        "error": pa.array([r["error"] for r in rows], pa.string()),
    })
    buffer = io.BytesIO()  # pyarrow wants a file object with ``closed``, which a GFile lacks
    pq.write_table(table, buffer)
    with tf.io.gfile.GFile(f"{uri}/{PARQUET_FILE}", "wb") as handle:
        handle.write(buffer.getvalue())


class ScoreWriterExecutor(base_executor.BaseExecutor):
    def Do(self, input_dict, output_dict, exec_properties) -> None:
        from tfx.components.util import model_utils

        scores = artifact_utils.get_single_instance(output_dict["scores"])
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        with tf.io.gfile.GFile(f"{examples.uri}/{INPUTS_FILE}") as handle:
            listed = json.load(handle)
        inputs = listed["inputs"]
        unreadable = [(row["file"], row["error"]) for row in inputs if row["error"]]
        record: dict[str, Any] = {"root": listed["root"], "inputs": len(inputs), "unreadable": unreadable,
                                  "not_utf8": [row["file"] for row in inputs if row.get("not_utf8")]}
        scores.set_int_custom_property(UNREADABLE, len(unreadable))
        tf.io.gfile.makedirs(scores.uri)
        blessing = artifact_utils.get_single_instance(input_dict["model_blessing"])
        if not model_utils.is_model_blessed(blessing):
            # The BulkInferrer scored nothing either (its executor returns on an unblessed model).
            reason = "the model was not blessed, so the BulkInferrer scored nothing"
            scores.set_string_custom_property(NOT_SCORED_REASON, reason)
            scores.set_int_custom_property(ROWS, 0)
            record["not_scored_reason"] = reason
        else:
            inference = artifact_utils.get_single_instance(input_dict["inference_result"])
            rows = score_rows(inputs, read_prediction_logs(inference.uri, exec_properties["prediction_output"],
                                                           exec_properties["score_output"]))
            write_tables(rows, scores.uri)
            scored = sum(1 for row in rows if row["error"] is None)
            scores.set_int_custom_property(ROWS, len(rows))
            scores.set_int_custom_property(SCORED, scored)
            record.update(rows=len(rows), scored=scored)
            if not all(math.isfinite(s) for row in rows for s in row["scores"]):
                logging.warning("Some scores are not finite (NaN or inf): see %s", scores.uri)
        with tf.io.gfile.GFile(os.path.join(scores.uri, RECORD_FILE), "w") as handle:
            json.dump(record, handle, indent=1)


class ScoreWriter(base_component.BaseComponent):
    """The BulkInferrer's PredictionLogs as one row per ``--score`` file, in CSV and Parquet."""

    SPEC_CLASS = ScoreWriterSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(ScoreWriterExecutor)

    def __init__(self, inference_result, examples, model_blessing, prediction_output: str, score_output: str):
        super().__init__(spec=ScoreWriterSpec(
            inference_result=inference_result, examples=examples, model_blessing=model_blessing,
            prediction_output=prediction_output, score_output=score_output,
            scores=types.Channel(type=Scores)))

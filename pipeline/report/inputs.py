"""What an evaluation was computed from: the candidate model, the eval split, the data manifest.

Shared by the per-family pictures, which run the candidate on held-out examples, and by
the tables, which name classes from the manifest when Transform has no vocabulary.
"""
import os

import tensorflow as tf

from pipeline.report.evaluations import Evaluation


def candidate_model(evaluation: Evaluation):
    """The Trainer's serving model (the one the metrics describe, pushed or not)."""
    from tfx.utils import path_utils

    if not evaluation.model_uri:
        raise FileNotFoundError(f"Evaluation {evaluation.uri} has no model input in MLMD.")
    return tf.saved_model.load(path_utils.serving_model_path(evaluation.model_uri))


def eval_split_files(evaluation: Evaluation) -> list[str]:
    if not evaluation.examples_uri:
        raise FileNotFoundError(f"Evaluation {evaluation.uri} has no examples input in MLMD.")
    files = sorted(tf.io.gfile.glob(os.path.join(evaluation.examples_uri, "Split-eval", "*")))
    if not files:
        raise FileNotFoundError(f"No eval split under {evaluation.examples_uri}.")
    return files


def eval_records(evaluation: Evaluation, limit: int) -> list[bytes]:
    """The first ``limit`` serialized tf.Examples of the evaluated eval split."""
    files = eval_split_files(evaluation)
    compression = "GZIP" if files[0].endswith(".gz") else ""
    return [r.numpy() for r in tf.data.TFRecordDataset(files, compression_type=compression).take(limit)]


def dataset_manifest(evaluation: Evaluation):
    """What is known about the evaluated data: the prepared data's manifest.json that
    ImportExampleGen read, else the facts the in-pipeline ExampleGen recorded on its
    Examples artifact (components/data_facts.py); None without either."""
    from components.data_facts import manifest_from_facts
    from data.tfrecords import MANIFEST_NAME, DatasetManifest

    if evaluation.data_dir and os.path.isfile(os.path.join(evaluation.data_dir, MANIFEST_NAME)):
        return DatasetManifest.from_json(os.path.join(evaluation.data_dir, MANIFEST_NAME))
    facts = evaluation.examples_facts
    return manifest_from_facts(facts, evaluation.data_dir or "") if facts else None

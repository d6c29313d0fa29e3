"""The files a Tuner leaves in its outputs, and the one reader of its search record.

``components/tuner.py`` writes them; the run summary, the report and ``--hyperparameters``
read them. The names live here so that readers need not import the Tuner (and Keras 3), and
the CLI's argument checks can name them before TensorFlow loads.
"""
import json
import os
from typing import Any

RESULTS_FILE = "tuner_results.json"     # TFX's name (tuner executor's _DEFAULT_TUNER_RESULTS_FILE_NAME)
BEST_FILE = "best_hyperparameters.txt"  # TFX's name (tuner executor's _DEFAULT_BEST_HP_FILE_NAME)
SEARCH_FILE = "search.json"             # this project's record: timings, untuned score, budget


def _read_json(path: str) -> Any:
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def read_search_results(results_uri: str) -> dict[str, Any] | None:
    """``search.json`` of a Tuner's ``tuner_results`` folder with its trial rows; None without one."""
    search = _read_json(os.path.join(results_uri, SEARCH_FILE))
    if search is not None:
        search["trials"] = _read_json(os.path.join(results_uri, RESULTS_FILE)) or []
    return search

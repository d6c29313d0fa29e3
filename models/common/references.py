"""Reference predictors: what a model must beat to be worth serving, measured on its data.

The Trainer fits cheap classical models on the same TRANSFORMED train split the network
sees (a bounded, seeded subsample, so it stays cheap on big data), scores them on the eval
split, and writes the result INTO the exported SavedModel as ``assets.extra/references.json``
(TF Serving ignores ``assets.extra``; the Pusher copies it with the model). The Evaluator
raises the blessing floor to the gate reference plus a margin (components/evaluator.py), and
the summary and ``models`` show the references next to the model. Format (any family)::

    {"metric": "<TFMA key metric>", "gate_reference": "logistic_regression", "margin": 0.02,
     "references": {"majority": 0.39, "logistic_regression": 0.61, "svm_rbf": 0.70}}
"""
import json
import os
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

REFERENCES_FILE = "references.json"
ASSETS_EXTRA = "assets.extra"
#: Train examples the classical models see at most (a stratified-by-chance subsample).
MAX_TRAIN_EXAMPLES = 3000
#: Eval examples they are scored on at most.
MAX_EVAL_EXAMPLES = 10000


def references_path(saved_model_dir: str) -> str:
    return os.path.join(saved_model_dir, ASSETS_EXTRA, REFERENCES_FILE)


def write_references(saved_model_dir: str, metric: str, references: Mapping[str, float],
                     gate_reference: str, margin: float, extra: Mapping[str, Any] | None = None) -> str:
    """Write ``references.json`` into an exported SavedModel; returns its path."""
    import tensorflow as tf

    if gate_reference not in references:
        raise ValueError(f"gate reference {gate_reference!r} is not one of {sorted(references)}")
    payload: dict[str, Any] = {"metric": metric, "gate_reference": gate_reference, "margin": float(margin),
                               "references": {k: float(v) for k, v in references.items()}}
    payload.update(extra or {})
    path = references_path(saved_model_dir)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    return path


def read_references(saved_model_dir: str) -> dict[str, Any] | None:
    """The model's ``references.json``, or None when it has none (older exports) or it is unreadable."""
    import tensorflow as tf

    path = references_path(saved_model_dir)
    try:
        with tf.io.gfile.GFile(path) as f:
            payload = json.loads(f.read())
    except (tf.errors.NotFoundError, ValueError, OSError):
        return None
    refs = payload.get("references")
    if not isinstance(refs, dict) or payload.get("gate_reference") not in refs:
        return None
    return payload


# The key metrics gated on (accuracy, top-k accuracy) are fractions: no model scores above this.
METRIC_MAXIMUM = 1.0


def gate_value(payload: Mapping[str, Any] | None) -> float | None:
    """The value the key metric must reach to beat the gate reference: reference + margin, at most the
    metric's maximum. Without the cap a perfect reference (a logistic regression scoring 1.0 on an easy
    set) would ask for 1.01, which no model can reach; capped, a perfect score ties a perfect reference."""
    if not payload:
        return None
    wanted = float(payload["references"][payload["gate_reference"]]) + float(payload.get("margin", 0.0))
    return min(wanted, METRIC_MAXIMUM)


def subsample(count: int, limit: int, seed: int) -> np.ndarray:
    """Sorted indices of at most ``limit`` of ``count`` examples (all of them if fewer)."""
    if count <= limit:
        return np.arange(count)
    return np.sort(np.random.RandomState(seed).choice(count, limit, replace=False))


def classifier_references(x_train: np.ndarray, y_train: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray,
                          seed: int = 0, max_train: int = MAX_TRAIN_EXAMPLES,
                          max_eval: int = MAX_EVAL_EXAMPLES) -> dict[str, float]:
    """Eval accuracy of majority class, logistic regression and an RBF SVM on flat features.

    The features are the model's transformed inputs (standardised pixels), so the
    comparison is on exactly the data the network gets.
    """
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.svm import SVC

    train = subsample(len(y_train), max_train, seed)
    evaluation = subsample(len(y_eval), max_eval, seed + 1)
    y_train, y_eval = np.asarray(y_train).reshape(-1), np.asarray(y_eval).reshape(-1)
    xt, yt = np.asarray(x_train, np.float32)[train].reshape(len(train), -1), y_train[train]
    xe, ye = np.asarray(x_eval, np.float32)[evaluation].reshape(len(evaluation), -1), y_eval[evaluation]
    values, counts = np.unique(yt, return_counts=True)
    majority = values[np.argmax(counts)]
    result = {"majority": float(np.mean(ye == majority))}
    if len(values) < 2:  # nothing to learn: every model is the majority
        result.update(logistic_regression=result["majority"], svm_rbf=result["majority"])
        return result
    logistic = LogisticRegression(C=0.1, max_iter=300, random_state=seed)
    with warnings.catch_warnings():  # not converging in max_iter is a bounded cost, not news
        warnings.simplefilter("ignore", ConvergenceWarning)
        result["logistic_regression"] = float(np.mean(logistic.fit(xt, yt).predict(xe) == ye))
    svm = SVC(C=10.0, gamma="scale", random_state=seed)
    result["svm_rbf"] = float(np.mean(svm.fit(xt, yt).predict(xe) == ye))
    return result

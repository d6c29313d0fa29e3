"""Reference predictors: what a model must beat to be worth serving, measured on its data.

The Trainer fits cheap classical models on the same TRANSFORMED train split the network
sees (a bounded, seeded subsample, so it stays cheap on big data), scores them on the eval
split (at most ``MAX_EVAL_EXAMPLES`` of it), and writes the result INTO the exported SavedModel as
``assets.extra/references.json`` (TF Serving ignores ``assets.extra``; the Pusher copies it with
the model). The Evaluator raises the blessing floor to what ``demand`` asks over the gate reference
(``gate_rule`` says it in one sentence; components/reference_gate.py), and the summary and ``models``
show the references next to the model. Format (any family)::

    {"metric": "<TFMA key metric>", "gate_reference": "logistic_regression", "margin": 0.02,
     "references": {"majority": 0.39, "logistic_regression": 0.61, "svm_rbf": 0.70},
     "eval_examples": 342, "eval_split_examples": 342}

``eval_examples``: how many eval examples the references were scored on; ``eval_split_examples``:
how many the eval split holds, when the Trainer knew (a subsample says so in the summary).
"""
import concurrent.futures
import dataclasses
import json
import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import numpy as np

_T = TypeVar("_T")
REFERENCES_FILE = "references.json"
ASSETS_EXTRA = "assets.extra"
#: Train examples the classical models see at most (a stratified-by-chance subsample).
MAX_TRAIN_EXAMPLES = 3000
#: Eval examples they are scored on at most.
MAX_EVAL_EXAMPLES = 10000


def references_path(saved_model_dir: str) -> str:
    return os.path.join(saved_model_dir, ASSETS_EXTRA, REFERENCES_FILE)


def write_references(saved_model_dir: str, metric: str, references: Mapping[str, float],
                     gate_reference: str, margin: float, extra: Mapping[str, Any] | None = None,
                     contained: Sequence[str] = ()) -> str:
    """Write ``references.json`` into an exported SavedModel; returns its path.

    ``contained``: references the model holds as a part of itself (the text family serves its Kneser-Ney
    reference with the network mixed on top): a model cannot beat a part of itself by a margin, so the
    gate asks it for at least that reference's score on the same examples, and the margin over the others
    (``gate_demand``)."""
    import tensorflow as tf

    if gate_reference not in references:
        raise ValueError(f"gate reference {gate_reference!r} is not one of {sorted(references)}")
    unknown = sorted(set(contained) - set(references))
    if unknown:
        raise ValueError(f"contained references {unknown} are not among {sorted(references)}")
    payload: dict[str, Any] = {"metric": metric, "gate_reference": gate_reference, "margin": float(margin),
                               "references": {k: float(v) for k, v in references.items()}}
    if contained:
        payload["contained"] = sorted(contained)
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
#: Near the ceiling the gate asks for at most this share of the reference's error on top of it.
ERROR_SHARE = 0.5

#: Why the gate's demand is what it is (``Demand.why``).
BY_MARGIN, BY_SHARE, BY_INTERVAL = "margin", "share of the error", "interval"
#: The reference is part of the model: at least its hits on the same examples (``contained_demand``).
BY_CONTAINED = "contained reference"


@dataclasses.dataclass(frozen=True)
class Demand:
    """What the key metric must reach to beat a reference (before the floor).

    ``counted``: the reference as the gate counts it (a perfect score on n examples counts as one error
    on them); ``threshold``: the value asked for; ``why``: which part of the rule set it.
    """

    reference: float
    counted: float
    threshold: float
    why: str
    reference_examples: int | None = None
    candidate_examples: int | None = None
    #: Which reference set it (None: the payload's ``gate_reference``).
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def gate_rule(margin: float, contained: Sequence[str] = ()) -> str:
    """The gate's rule in one sentence (the summary, the report and the model card print it); ``contained``:
    the references the model holds as a part of itself (``write_references``)."""
    if contained:
        return (f"The model must reach every reference it does not contain plus the smaller of the margin "
                f"{margin:g} and {ERROR_SHARE:.0%} of that reference's error (or, if lower, a score whose 95% "
                f"interval on its eval examples lies wholly above it), score at least as many hits as the reference "
                f"it contains ({', '.join(contained)}) on the same eval examples, less the noise of the examples where "
                "the two disagree (and a negative margin), and never less than the floor.")
    return (f"The model must reach the gate reference plus the smaller of the margin {margin:g} and "
            f"{ERROR_SHARE:.0%} of the reference's error, or, if lower, a score whose 95% interval on its eval "
            "examples lies wholly above the reference (a perfect reference counts as one error on the examples "
            "it was scored on, so only a tie with a reference perfect on the same examples needs a perfect "
            "score), and never less than the floor.")


def counted_reference(value: float, examples: int | None) -> float:
    """A reference's score as the gate counts it: at most one error short of perfect on the ``examples`` it
    was scored on. Zero errors on n examples does not show an error rate of zero (its 95% interval reaches
    down to n / (n + 3.84)), and taken at face value it would ask every model for a perfect score."""
    if examples and examples >= 1:
        return min(float(value), METRIC_MAXIMUM - 1.0 / float(examples))
    return float(value)


def interval_bar(reference: float, examples: int | None) -> float | None:
    """The lowest score whose 95% Wilson interval on ``examples`` lies wholly above ``reference``; None
    when even a perfect score's does not (too few examples) or the count is unknown."""
    from models.common import intervals

    def low(value: float) -> float:
        bounds = intervals.wilson(value, examples)  # type: ignore[arg-type]
        return bounds[0] if bounds else 0.0

    if not examples or examples < 1 or low(METRIC_MAXIMUM) <= reference:
        return None
    below, above = max(0.0, reference), METRIC_MAXIMUM  # low(below) <= reference < low(above)
    for _ in range(200):
        if above - below <= 1e-12:
            break
        middle = (below + above) / 2
        below, above = (below, middle) if low(middle) > reference else (middle, above)
    return above


def demand(reference: float, margin: float, reference_examples: int | None = None,
           candidate_examples: int | None = None) -> Demand:
    """The gate's demand over a reference scoring ``reference`` on ``reference_examples`` eval examples, for
    a model scored on ``candidate_examples`` (see ``gate_rule``)."""
    counted = counted_reference(reference, reference_examples)
    share = ERROR_SHARE * (METRIC_MAXIMUM - counted)
    threshold, why = (counted + margin, BY_MARGIN) if margin <= share else (counted + share, BY_SHARE)
    bar = interval_bar(counted, candidate_examples)
    if bar is not None and bar < threshold:
        threshold, why = bar, BY_INTERVAL
    return Demand(float(reference), counted, min(threshold, METRIC_MAXIMUM), why,
                  int(reference_examples) if reference_examples else None,
                  int(candidate_examples) if candidate_examples else None)


#: One-sided 5% normal quantile: how far below a contained reference a model may fall on the same examples.
NON_INFERIORITY_Z = 1.645


def contained_demand(reference: float, reference_examples: int | None, discordant: float | None = None,
                     margin: float = 0.0) -> Demand:
    """What a model must reach over a reference it contains: at least that reference's hits on the same
    examples, less the noise of the ``discordant`` examples where one of the two hits and the other does not
    (non-inferiority by McNemar's paired test, one-sided 5%: a model whose extra part helped on held-out data
    but ties on these is not refused for chance). Never less than half a hit below: the float a metric
    library computes for the same count must not fall under it. A negative ``margin`` (the model may trail
    its references) lowers it by as much; a positive one does not raise it (no model beats a part of itself)."""
    hits = max(0.5, NON_INFERIORITY_Z * math.sqrt(discordant)) if discordant else 0.5
    slack = hits / float(reference_examples) if reference_examples else 0.0
    threshold = max(0.0, float(reference) - slack + min(float(margin), 0.0))
    return Demand(float(reference), float(reference), threshold, BY_CONTAINED,
                  int(reference_examples) if reference_examples else None,
                  int(reference_examples) if reference_examples else None)


def gate_demand(payload: Mapping[str, Any] | None, candidate_examples: int | None = None) -> Demand | None:
    """The demand over a model's references (its references.json), or None without one: over its gate
    reference, or, for a model that contains some of them (``write_references``), the highest of
    ``contained_demand`` for those and ``demand`` for the rest."""
    if not payload:
        return None
    reference_examples = payload.get("eval_examples") or None
    candidates = candidate_examples or payload.get("eval_split_examples") or reference_examples
    margin = float(payload.get("margin", 0.0))
    contained = set(payload.get("contained") or ())
    if not contained:
        return demand(float(payload["references"][payload["gate_reference"]]), margin, reference_examples, candidates)
    paired = payload.get("paired") or {}
    demands = [dataclasses.replace(
        contained_demand(float(value), reference_examples, (paired.get(name) or {}).get("discordant"), margin)
        if name in contained
        else demand(float(value), margin, reference_examples, candidates), name=name)
        for name, value in sorted(payload["references"].items())]
    # On a tie (a perfect reference and a perfect contained one) the reference the model does not contain
    # decides: its rule says how it counts a perfect score.
    return max(demands, key=lambda wanted: (round(wanted.threshold, 12), wanted.name not in contained))


def beside(fit: Callable[..., _T], *args: Any) -> concurrent.futures.Future[_T]:
    """``fit(*args)`` started in a thread, to run while the network trains; ``.result()`` waits for it and
    raises what it raised. Its BLAS calls keep to one thread, so the training keeps the other cores."""
    def limited() -> _T:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return fit(*args)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="references")
    try:
        return pool.submit(limited)
    finally:
        pool.shutdown(wait=False)  # the thread ends when ``fit`` returns


def eval_examples_scored(count: int, max_eval: int = MAX_EVAL_EXAMPLES) -> int:
    """How many of ``count`` eval examples ``classifier_references`` scores its predictors on."""
    return int(min(count, max_eval))


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
    result["svm_rbf"] = rbf_svm_accuracy(xt, yt, xe, ye, seed)
    return result


#: Eval examples whose kernel rows ``rbf_svm_accuracy`` holds at once (a bounded block of memory).
KERNEL_BLOCK = 1024


def rbf_svm_accuracy(xt: np.ndarray, yt: np.ndarray, xe: np.ndarray, ye: np.ndarray, seed: int = 0) -> float:
    """Eval accuracy of ``SVC(C=10, kernel="rbf", gamma="scale")``, its kernel computed by BLAS.

    libsvm evaluates the RBF kernel one pair of examples at a time: on images (thousands of pixels) that was
    most of the Trainer's reference time, the prediction on the eval split most of all. The same classifier
    on a precomputed kernel: libsvm solves the same problem on the same kernel values (rounding aside), and
    predicts from the columns of its support vectors only, so only those are computed.
    """
    from sklearn.metrics.pairwise import rbf_kernel
    from sklearn.svm import SVC

    train = np.asarray(xt, np.float64)
    variance = train.var()   # gamma="scale", as sklearn's SVC computes it
    gamma = 1.0 / (train.shape[1] * variance) if variance != 0 else 1.0
    svm = SVC(C=10.0, kernel="precomputed", random_state=seed).fit(rbf_kernel(train, gamma=gamma), yt)
    support = train[svm.support_]
    correct = 0
    for start in range(0, len(ye), KERNEL_BLOCK):
        block = np.asarray(xe[start:start + KERNEL_BLOCK], np.float64)
        kernel = np.zeros((len(block), len(train)))
        kernel[:, svm.support_] = rbf_kernel(block, support, gamma=gamma)
        correct += int(np.sum(svm.predict(kernel) == ye[start:start + KERNEL_BLOCK]))
    return correct / len(ye) if len(ye) else float("nan")

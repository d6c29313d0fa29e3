"""Pictures of a text model's evaluation: top-5 and perplexity per slice, and sample generations.

Both work off what the evaluation recorded (its slices, the candidate's ``generate``
signature, the eval split and the data manifest), so they need no model code.
"""

import dataclasses
from typing import Any

import pandas as pd
import tensorflow as tf
from matplotlib.figure import Figure

from pipeline.report.evaluations import Evaluation
from pipeline.report.figures import plot_slice_metric
from pipeline.report.inputs import candidate_model, dataset_manifest, eval_records
from pipeline.report.tables import slice_metrics_frame

# TFMA's name of the family's perplexity metric (models/seq2seq/metrics.py); lower is better.
PERPLEXITY = "perplexity"


def seq2seq_pictures(evaluation: Evaluation) -> dict[str, Figure]:
    """The key metric by document, then perplexity by each slicing feature (worst slices first).

    Works off whatever slices the evaluation has: the family's slicing features that are
    present (``document``, ``position``), else the first feature sliced at all; perplexity
    only when the evaluation computed it.
    """
    frame = slice_metrics_frame(evaluation)
    present = [f for f in frame["feature"].unique() if f]
    wanted = [f for f in evaluation.report_family.slicing_features if f in present]
    features = wanted or present[:1]
    if not features:
        return {}
    metric = frame.attrs["key_metric"]
    pictures = {f"{metric} by {features[0]}": plot_slice_metric(frame, feature=features[0],
                                                                 title=f"{metric} by {features[0]}")}
    if PERPLEXITY in frame.columns and metric != PERPLEXITY:
        by_perplexity = frame.sort_values([PERPLEXITY, "slice"], ascending=[False, True]).reset_index(drop=True)
        by_perplexity.attrs.update(key_metric=PERPLEXITY, higher_is_better=False)
        for feature in features:
            title = f"{PERPLEXITY} by {feature} (lower is better)"
            pictures[title] = plot_slice_metric(by_perplexity, feature=feature, title=title)
    return pictures


@dataclasses.dataclass
class _Window:
    index: int
    context: list[str]
    target: list[str]


def _text(feature, key: str) -> str:
    return feature[key].bytes_list.value[0].decode()


def _documents(records: list[bytes]) -> dict[str, list[_Window]]:
    """Eval windows by document, in text order (the window index is the tail of ``example_id``)."""
    by_document: dict[str, list[_Window]] = {}
    for record in records:
        feature = tf.train.Example.FromString(record).features.feature
        index = int(_text(feature, "example_id").rsplit("/", 1)[-1])
        by_document.setdefault(_text(feature, "document"), []).append(
            _Window(index, _text(feature, "context").split(), _text(feature, "target").split()))
    return {document: sorted(windows, key=lambda w: w.index) for document, windows in by_document.items()}


def _continuations(windows: list[_Window], stride: int | None, words: int) -> list[tuple[_Window, list[str]]]:
    """(prompt window, the true words after its context): up to ``words`` contiguous words of the eval text.

    Windows overlap (one every ``stride`` words), so the words after a window's context are
    in the following windows of the same held-out block. Without the stride (an old
    manifest), only the window's own target is known.
    """
    if not stride:
        return [(w, w.target) for w in windows]
    text: dict[int, str] = {}
    for window in windows:
        for offset, word in enumerate(window.context + window.target):
            text[window.index * stride + offset] = word
    found = []
    for window in windows:
        start, following = window.index * stride + len(window.context), list[str]()
        while len(following) < words and start + len(following) in text:
            following.append(text[start + len(following)])
        found.append((window, following))
    return found


def _picked(candidates: list[tuple[_Window, list[str]]], per_document: int,
            words: int) -> list[tuple[_Window, list[str]]]:
    """``per_document`` prompts spread over the document, preferring ones with a full continuation."""
    full = [c for c in candidates if len(c[1]) >= words]
    pool = full or sorted(candidates, key=lambda c: -len(c[1]))[:1]
    step = max(1, len(pool) // per_document)
    return pool[::step][:per_document]


def sample_generations(evaluation: Evaluation, per_document: int = 2, max_documents: int = 8, words: int = 30,
                       max_new_tokens: int = 40, max_records: int = 50_000) -> pd.DataFrame:
    """Greedy continuations of held-out prompts by the candidate's ``generate``, next to the true text.

    A few prompts per held-out document (the documents with the most eval windows first),
    each continued for ``max_new_tokens`` tokens and shown beside the ``words`` words that
    really follow it in the document, so a reader judges more than the 4-word targets the
    metrics score.
    """
    documents = _documents(eval_records(evaluation, max_records))
    manifest = dataset_manifest(evaluation)
    stride = (manifest.extra.get("stride") if manifest is not None else None) or None
    ranked = sorted(documents, key=lambda d: (-len(documents[d]), d))[:max_documents]
    rows: list[dict[str, Any]] = []
    for document in ranked:
        for window, following in _picked(_continuations(documents[document], stride, words), per_document, words):
            rows.append({"document": document, "prompt": " ".join(window.context), "true": following})
    if not rows:
        return pd.DataFrame(columns=["document", "prompt", "generated", "actual"])
    from models.seq2seq.export import generate_request

    signature = candidate_model(evaluation).signatures["generate"]
    outputs = signature(**generate_request([row["prompt"] for row in rows], signature.structured_input_signature[1],
                                           max_new_tokens=max_new_tokens))
    return pd.DataFrame({
        "document": [row["document"] for row in rows],
        "prompt": [row["prompt"] for row in rows],
        "generated": [c.decode() for c in outputs["continuations"].numpy()],
        "actual": [" ".join(row["true"]) for row in rows],
    })

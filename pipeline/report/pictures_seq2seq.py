"""Pictures of a text model's evaluation: the key metric by document, and sample generations.

Both work off what the evaluation recorded (its slices, the candidate's ``generate``
signature, the eval split), so they need no model code.
"""

import pandas as pd
import tensorflow as tf
from matplotlib.figure import Figure

from pipeline.report.evaluations import Evaluation
from pipeline.report.figures import plot_slice_metric
from pipeline.report.inputs import candidate_model, eval_records
from pipeline.report.tables import slice_metrics_frame


def seq2seq_pictures(evaluation: Evaluation) -> dict[str, Figure]:
    """Text model (stub, generic): the key metric by document, worst documents first.

    Works off whatever slices the evaluation has: the first slicing feature of the family
    that is present (``document``), else the first feature sliced at all.
    """
    frame = slice_metrics_frame(evaluation)
    present = [f for f in frame["feature"].unique() if f]
    wanted = [f for f in evaluation.report_family.slicing_features if f in present]
    feature = (wanted or present or [None])[0]
    if feature is None:
        return {}
    metric = frame.attrs["key_metric"]
    return {f"{metric} by {feature}": plot_slice_metric(frame, feature=feature, title=f"{metric} by {feature}")}


def sample_generations(evaluation: Evaluation, count: int = 6, max_new_tokens: int = 12) -> pd.DataFrame:
    """Greedy continuations of held-out eval contexts by the candidate's ``generate``, next to the real text.

    Contexts are spread over the eval split (every n-th window), so several documents show.
    """
    model = candidate_model(evaluation)
    records = eval_records(evaluation, 2000)
    picked = [tf.train.Example.FromString(r).features.feature for r in records[:: max(1, len(records) // count)]]
    picked = picked[:count]
    text = lambda feature, key: feature[key].bytes_list.value[0].decode()  # noqa: E731
    contexts = [text(f, "context") for f in picked]
    outputs = model.signatures["generate"](
        prompts=tf.constant(contexts), max_new_tokens=tf.constant(max_new_tokens, tf.int32),
        top_k=tf.constant(1, tf.int32), temperature=tf.constant(1.0, tf.float32))
    return pd.DataFrame({
        "document": [text(f, "document") for f in picked],
        "context": contexts,
        "generated": [c.decode() for c in outputs["continuations"].numpy()],
        "actual": [text(f, "target") for f in picked],
    })

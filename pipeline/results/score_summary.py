"""The run summary's ``Scores:`` line (``run --score DIR``), and the paragraph naming every scoring file
that could not be read, from the ScoreWriter's Scores artifact (components/scoring.py)."""
from __future__ import annotations

import json
import os

from stackenv.errors import ProjectError

import tensorflow as tf

from components.scoring import CSV_FILE, NOT_SCORED_REASON, PARQUET_FILE, RECORD_FILE, ROWS, SCORED
from pipeline.results import mlmd

#: Unreadable files named in the paragraph (all are counted, and all are rows of scores.csv).
SHOWN = 20


class UnreadableScoringFiles(ProjectError):
    """Files of the --score folder that could not be read: rows with their reason, no prediction."""


def scores_uri(score_writer: mlmd.NodeExecution | None) -> str | None:
    """Where the ScoreWriter of a run wrote (None: the run did not score)."""
    scores = (score_writer.outputs.get("scores") or [None])[0] if score_writer else None
    return scores.uri if scores is not None else None


def _record(uri: str) -> dict:
    path = os.path.join(uri, RECORD_FILE)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as handle:
        return json.load(handle)


def line(score_writer: mlmd.NodeExecution | None, blessed_reasons: list[str]) -> str | None:
    """``Scores: ...``: where the predictions are and how many rows, or why nothing was scored."""
    scores = (score_writer.outputs.get("scores") or [None])[0] if score_writer else None
    if scores is None:
        return None
    reason = mlmd.custom_property(scores, NOT_SCORED_REASON)
    if reason:
        why = f" ({'; '.join(blessed_reasons)})" if blessed_reasons else ""
        return f"Scores: nothing scored: {reason}{why}."
    rows, scored = mlmd.custom_property(scores, ROWS), mlmd.custom_property(scores, SCORED)
    renamed = _record(scores.uri).get("not_utf8") or []
    named = ("; " + f"{len(renamed)} scored under a file name that is not UTF-8 (each such byte shown as \\xNN): "
             + ", ".join(renamed[:5]) + (f" and {len(renamed) - 5} more" if len(renamed) > 5 else "")
             if renamed else "")
    return (f"Scores: {rows} rows ({scored} scored, {rows - scored} unreadable) -> "
            f"{os.path.join(scores.uri, CSV_FILE)} and {PARQUET_FILE}{named}")


def check_unreadable(uri: str | None) -> None:
    """UnreadableScoringFiles (exit code 2) naming the files of the --score folder that could not be read,
    from the ScoreWriter's record at ``uri`` (None: the run did not score)."""
    record = _record(uri) if uri else {}
    unreadable = record.get("unreadable") or []
    if not unreadable or uri is None:
        return
    shown = "; ".join(f"{name} ({why})" for name, why in unreadable[:SHOWN])
    more = f"; and {len(unreadable) - SHOWN} more" if len(unreadable) > SHOWN else ""
    where = (f"they are rows with their reason and no prediction in {os.path.join(uri, CSV_FILE)}"
             if record.get("rows") else "nothing was scored")
    raise UnreadableScoringFiles(
        f"{len(unreadable)} of the {record.get('inputs')} file(s) in the --score folder {record.get('root')} could "
        f"not be read, so they have no prediction ({where}): {shown}{more}. Replace them with good copies or "
        "remove them from the folder, and run again.")

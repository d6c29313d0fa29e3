"""What the evaluated model was trained on, for a text corpus: documents and words read, the
split, and every file not used with its reason (``corpus`` in the ExampleGen's
the Examples artifact's data facts or the prepared data's manifest; ``data/text_corpus.py``).

The run summary prints the same line; the report lists every skipped file, where the summary
names the first few per reason.
"""
from __future__ import annotations

from typing import Any

import pandas as pd

from pipeline.report.evaluations import Evaluation


def corpus_data(evaluation: Evaluation) -> dict[str, Any] | None:
    """``{"line", "corpus", "split"}`` for report.json; None when the data has no corpus facts."""
    from data.text_corpus import CorpusFacts
    from pipeline.report.inputs import dataset_manifest

    try:
        manifest = dataset_manifest(evaluation)
    except (OSError, ValueError):
        return None
    corpus = (manifest.extra.get("corpus") if manifest is not None else None) or None
    if corpus is None:
        return None
    return {"line": CorpusFacts.from_json(corpus).describe(), "corpus": corpus,
            "split": (manifest.extra.get("split") or {}).get("description")}


def skipped_frame(data: dict[str, Any]) -> pd.DataFrame:
    """One row per file not used (its path below the source, the reason, the detail), then one per
    file read with a guessed encoding."""
    from data.text_corpus import REASONS

    rows = [(s["document"], f"not used: {REASONS.get(s['reason'], s['reason'])}", s.get("detail", ""))
            for s in data["corpus"].get("skipped", [])]
    rows += [(g["document"], "read with a guessed encoding", g["encoding"])
             for g in data["corpus"].get("guessed_encodings", [])]
    return pd.DataFrame(rows, columns=["file", "status", "detail"])

"""A family's own pictures and sample table, looked up in the family table by dotted path."""

import pandas as pd
from matplotlib.figure import Figure

from pipeline.report.evaluations import Evaluation
from pipeline.report.families import resolve


def family_pictures(evaluation: Evaluation) -> dict[str, Figure]:
    """Title -> figure; empty for a family without pictures."""
    pictures = evaluation.report_family.pictures
    return resolve(pictures)(evaluation) if pictures else {}


def family_samples(evaluation: Evaluation) -> pd.DataFrame | None:
    """The family's sample table (e.g. generations of a text model); None if it has none."""
    samples = evaluation.report_family.samples
    return resolve(samples)(evaluation) if samples else None

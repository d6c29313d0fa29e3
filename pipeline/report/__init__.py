"""Inspect an evaluation: metrics per slice, baseline comparison, validation, pictures, HTML.

The notebook (``notebooks/inspect_metrics.ipynb``), the ``report`` command and the tests
use the names below; each lives in a module with one job:

- ``evaluations``: find evaluations through MLMD lineage (``pipeline/results/mlmd.py``)
- ``tables`` / ``validation``: TFMA results as pandas (read by ``artifacts/tfma_results.py``)
- ``figures``: matplotlib figures of those tables
- ``families``: the per-family facts (key metric, slices, pictures); ``pictures``
  looks up a family's own pictures (``pictures_cnn``, ``pictures_seq2seq``)
- ``page``: the self-contained HTML report and its JSON
"""
from pipeline.report.evaluations import Evaluation, ReportError, find_latest_evaluation, list_evaluations
from pipeline.report.families import GENERIC, ReportFamily, get_report_family
from pipeline.report.figures import MAX_BARS, figure_png, plot_confusion_matrix, plot_slice_metric
from pipeline.report.page import html_table, render_html, report_data, write_report
from pipeline.report.pictures import family_pictures, family_samples
from pipeline.report.pictures_cnn import cnn_pictures, misclassified_examples, plot_misclassified
from pipeline.report.pictures_seq2seq import sample_generations, seq2seq_pictures
from pipeline.report.tables import (
                                    class_names,
                                    comparison_frame,
                                    confusion_matrix_frame,
                                    key_metric,
                                    load_result,
                                    load_time_series,
                                    per_class_frame,
                                    slice_metrics_frame,
                                    style_slice_metrics,
                                    worst_slices,
)
from pipeline.report.validation import validation_frame, validation_summary

__all__ = [
    "Evaluation", "ReportError", "find_latest_evaluation", "list_evaluations",
    "GENERIC", "ReportFamily", "get_report_family",
    "MAX_BARS", "figure_png", "plot_confusion_matrix", "plot_slice_metric",
    "html_table", "render_html", "report_data", "write_report",
    "family_pictures", "family_samples",
    "cnn_pictures", "misclassified_examples", "plot_misclassified",
    "sample_generations", "seq2seq_pictures",
    "class_names", "comparison_frame", "confusion_matrix_frame", "key_metric", "load_result",
    "load_time_series", "per_class_frame", "slice_metrics_frame", "style_slice_metrics", "worst_slices",
    "validation_frame", "validation_summary",
]

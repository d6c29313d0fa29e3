"""What the evaluation could not measure: classes and slices with no eval example.

The run summary prints these (``pipeline/results/summary.py``); a reader of the report alone would
otherwise take a slice table without, say, ``brightness=bright`` for a complete one. Both
read the same StatisticsGen output through ``components/split_check.py``.
"""
import logging
import os

import tensorflow as tf

from pipeline.report.evaluations import Evaluation

log = logging.getLogger(__name__)


def split_warnings(evaluation: Evaluation) -> list[str]:
    """The split check's warnings for the evaluated examples; [] when their statistics are unknown."""
    from components.split_check import SplitError, check_splits, read_split_facts

    uri = evaluation.statistics_uri
    if not uri or not tf.io.gfile.isdir(uri):
        return []
    splits = sorted(entry.rstrip("/")[len("Split-"):] for entry in tf.io.gfile.listdir(uri)
                    if entry.startswith("Split-") and tf.io.gfile.exists(
                        os.path.join(uri, entry.rstrip("/"), "FeatureStats.pb")))
    family = evaluation.report_family
    try:
        return check_splits(read_split_facts(uri, splits, family.slicing_features), family.split_feature)
    except SplitError as error:  # that run was stopped by the validator; keep the report going
        return [error.paragraph]

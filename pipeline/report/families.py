"""What the report needs to know about each model family: the one table to swap for a registry.

Literals, not imports from models/: the report reads any output dir without loading model
code. Pictures and sample tables are dotted paths, resolved only when a report draws them.
"""
import dataclasses
import importlib
from typing import Callable, Dict, Optional, Tuple


@dataclasses.dataclass(frozen=True)
class ReportFamily:
    name: str
    key_metric: str                         # the gate metric; slices are ranked by it
    slicing_features: Tuple[str, ...]
    pictures: Optional[str] = None          # dotted path: Evaluation -> {title: Figure}
    class_vocabulary: Optional[str] = None  # TFT vocabulary of class names, in id order
    higher_is_better: bool = True
    samples: Optional[str] = None           # dotted path: Evaluation -> DataFrame of text columns
    samples_title: str = "Samples"


GENERIC = ReportFamily(name="generic", key_metric="accuracy", slicing_features=())

REPORT_FAMILIES: Dict[str, ReportFamily] = {
    "cnn": ReportFamily(name="cnn", key_metric="sparse_categorical_accuracy",
                        slicing_features=("label", "brightness"),
                        pictures="pipeline.report.pictures_cnn.cnn_pictures", class_vocabulary="label"),
    # The gate metric, top-5 accuracy, under TFMA's name (models/seq2seq/evaluation.py: GATE_METRIC).
    "seq2seq": ReportFamily(name="seq2seq", key_metric="sparse_top_k_categorical_accuracy",
                            slicing_features=("document", "position"),
                            pictures="pipeline.report.pictures_seq2seq.seq2seq_pictures",
                            samples="pipeline.report.pictures_seq2seq.sample_generations",
                            samples_title="Sample generations (greedy, held-out documents)"),
}


def get_report_family(name: str) -> ReportFamily:
    """The family's report settings; unknown families get generic tables, no pictures."""
    return REPORT_FAMILIES.get(name, dataclasses.replace(GENERIC, name=name))


def resolve(dotted_path: str) -> Callable:
    """``package.module.function`` -> the function."""
    module, _, name = dotted_path.rpartition(".")
    return getattr(importlib.import_module(module), name)

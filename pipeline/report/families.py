"""The report's view of a model family, read from the family registry (pipeline/families/).

The report reads any output dir without loading model code: the registry imports nothing
heavy, and pictures and sample tables are dotted paths, resolved only when a report draws them.
"""
import dataclasses
import importlib
from collections.abc import Callable


@dataclasses.dataclass(frozen=True)
class ReportFamily:
    name: str
    key_metric: str                         # the gate metric; slices are ranked by it
    slicing_features: tuple[str, ...]
    pictures: str | None = None          # dotted path: Evaluation -> {title: Figure}
    class_vocabulary: str | None = None  # TFT vocabulary of class names, in id order
    higher_is_better: bool = True
    samples: str | None = None           # dotted path: Evaluation -> DataFrame of text columns
    samples_title: str = "Samples"
    split_feature: str | None = None     # held out whole by the split (text documents)


GENERIC = ReportFamily(name="generic", key_metric="accuracy", slicing_features=())


def get_report_family(name: str) -> ReportFamily:
    """The registered family's report settings; unknown families get generic tables, no pictures."""
    from pipeline.families import FAMILIES

    family = FAMILIES.get(name)
    if family is None:
        return dataclasses.replace(GENERIC, name=name)
    return ReportFamily(name=family.name, key_metric=family.gate_metric, slicing_features=family.slicing_features,
                        pictures=family.report.pictures, class_vocabulary=family.class_vocabulary,
                        samples=family.report.samples, samples_title=family.report.samples_title,
                        split_feature=family.split_feature)


def resolve(dotted_path: str) -> Callable:
    """``package.module.function`` -> the function."""
    module, _, name = dotted_path.rpartition(".")
    return getattr(importlib.import_module(module), name)

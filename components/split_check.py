"""Check ExampleGen's splits from StatisticsGen's output, before Transform sees them.

An empty train or eval split (a 2-image folder, text whose documents all hash to one side)
otherwise fails later in Transform or the Trainer with a KeyError that names no split; a
class missing from train is a model that can never predict it. Reading the statistics
artifact (not the examples) keeps the check cheap, and running it inside the validator's
executor keeps it runner-agnostic: it runs wherever ExampleValidator runs, Kubeflow included.

Slices other than classes (an image's brightness, a text window's position or document) are
checked the same way when the caller names them (the family registry declares them): a
value seen in train but absent from eval is a slice the Evaluator never measures, so the
run summary and the report say so instead of showing a slice table that silently lacks it.
"""
from __future__ import annotations

import dataclasses
import os

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

from data import features


class SplitError(ProjectError):
    """A split is empty, or train lacks a class; the message gives the counts and what to do."""

    exit_code = EXIT_PIPELINE_FAILED


# Values listed per slice warning; a block-split corpus can miss many short documents.
MAX_LISTED = 8


@dataclasses.dataclass
class SplitFacts:
    examples: int
    classes: dict[str, int]  # class name -> examples (empty when the data has no class label)
    # slicing feature -> value -> examples; only features whose value histogram is complete
    slices: dict[str, dict[str, int]] = dataclasses.field(default_factory=dict)


def _value_counts(feature) -> dict[str, int] | None:
    """Value -> examples of a string feature; None when TFDV cut its histogram (too many values)."""
    if not feature.HasField("string_stats"):
        return None
    buckets = feature.string_stats.rank_histogram.buckets
    if len(buckets) < feature.string_stats.unique:
        return None
    return {bucket.label: int(bucket.sample_count) for bucket in buckets}


def read_split_facts(statistics_uri: str, splits: list[str],
                     slicing_features: tuple[str, ...] = ()) -> dict[str, SplitFacts]:
    """Examples, per-class counts and per-slice-value counts of each split, from a StatisticsGen artifact."""
    import tensorflow_data_validation as tfdv

    facts = {}
    for split in splits:
        stats = tfdv.load_stats_binary(os.path.join(statistics_uri, f"Split-{split}", "FeatureStats.pb"))
        dataset = stats.datasets[0] if stats.datasets else None
        classes: dict[str, int] = {}
        slices: dict[str, dict[str, int]] = {}
        for feature in dataset.features if dataset is not None else []:
            name = ".".join(feature.path.step)
            counts = _value_counts(feature)
            if name == features.LABEL and counts is not None:
                classes = counts
            elif name in slicing_features and counts is not None:
                slices[name] = counts
        facts[split] = SplitFacts(int(dataset.num_examples) if dataset is not None else 0, classes, slices)
    return facts


def check_splits(facts: dict[str, SplitFacts], split_feature: str | None = None) -> list[str]:
    """Raise SplitError for an empty split or a class absent from train; return warnings.

    A class or slice with no eval example is a warning, not an error: the model can still
    learn it, but the Evaluator cannot measure it. ``split_feature`` is the unit the split
    holds out whole (text documents): when its values never occur in both splits, that is
    the split working as designed, not a missing slice.
    """
    counts = ", ".join(f"{split} {f.examples}" for split, f in sorted(facts.items()))
    empty = sorted(split for split, f in facts.items() if f.examples == 0)
    if empty:
        raise SplitError(
            f"The {' and '.join(empty)} split{'s are' if len(empty) > 1 else ' is'} empty (examples per split: "
            f"{counts}). ExampleGen hashes each example (or document) into train:eval 4:1, so very small data can "
            "leave a split empty. Add more data (at least a few examples per class; for text, several "
            "documents), then run again.")
    train = facts.get("train")
    all_classes = set().union(*(f.classes for f in facts.values()))
    missing = sorted(all_classes - set(train.classes)) if train is not None else []
    if missing and train is not None:  # (missing is only non-empty with a train split)
        raise SplitError(
            f"Class(es) {missing} have no example in the train split (examples per split: {counts}; train "
            f"classes: {dict(sorted(train.classes.items()))}), so the model could never predict them. Add more "
            "examples of those classes (the split is a hash of each example's id), then run again.")
    warnings = []
    for split, split_facts in sorted(facts.items()):
        absent = sorted(all_classes - set(split_facts.classes))
        if split != "train" and absent:
            warnings.append(f"class(es) {absent} have no example in the {split} split: they are not evaluated")
    return warnings + _slice_warnings(facts, split_feature)


def _slice_warnings(facts: dict[str, SplitFacts], split_feature: str | None) -> list[str]:
    """A slice value train has and another split lacks: named, with how many train examples it has."""
    train = facts.get("train")
    if train is None:
        return []
    warnings = []
    for split, split_facts in sorted(facts.items()):
        if split == "train":
            continue
        for feature, train_counts in sorted(train.slices.items()):
            values = split_facts.slices.get(feature)
            if values is None:
                continue
            if feature == split_feature and not set(train_counts) & set(values):
                continue  # held out whole: every value is in one split by design
            absent = sorted(set(train_counts) - set(values))
            if absent:
                listed = ", ".join(f"{feature}={value} ({train_counts[value]} train)" for value in absent[:MAX_LISTED])
                more = f" and {len(absent) - MAX_LISTED} more" if len(absent) > MAX_LISTED else ""
                warnings.append(f"slice(s) {listed}{more} have no example in the {split} split: they are not "
                                "evaluated (the slice table lacks them)")
    return warnings

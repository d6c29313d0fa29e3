"""Check ExampleGen's splits from StatisticsGen's output, before Transform sees them.

An empty train or eval split (a 2-image folder, text whose documents all hash to one side)
otherwise fails later in Transform or the Trainer with a KeyError that names no split; a
class missing from train is a model that can never predict it. Reading the statistics
artifact (not the examples) keeps the check cheap, and running it inside the validator's
executor keeps it runner-agnostic: it runs wherever ExampleValidator runs, Kubeflow included.
"""
from __future__ import annotations

import dataclasses
import os

from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

from data import features


class SplitError(ProjectError):
    """A split is empty, or train lacks a class; the message gives the counts and what to do."""

    exit_code = EXIT_PIPELINE_FAILED


@dataclasses.dataclass
class SplitFacts:
    examples: int
    classes: dict[str, int]  # class name -> examples (empty when the data has no class label)


def read_split_facts(statistics_uri: str, splits: list[str]) -> dict[str, SplitFacts]:
    """Examples and per-class counts of each split, from a StatisticsGen artifact."""
    import tensorflow_data_validation as tfdv

    facts = {}
    for split in splits:
        stats = tfdv.load_stats_binary(os.path.join(statistics_uri, f"Split-{split}", "FeatureStats.pb"))
        dataset = stats.datasets[0] if stats.datasets else None
        classes: dict[str, int] = {}
        for feature in dataset.features if dataset is not None else []:
            if feature.path.step == [features.LABEL] and feature.HasField("string_stats"):
                for bucket in feature.string_stats.rank_histogram.buckets:
                    classes[bucket.label] = int(bucket.sample_count)
        facts[split] = SplitFacts(int(dataset.num_examples) if dataset is not None else 0, classes)
    return facts


def check_splits(facts: dict[str, SplitFacts]) -> list[str]:
    """Raise SplitError for an empty split or a class absent from train; return warnings.

    A class with no eval example is a warning, not an error: the model can still learn it,
    but the Evaluator cannot measure it.
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
    if missing:
        raise SplitError(
            f"Class(es) {missing} have no example in the train split (examples per split: {counts}; train "
            f"classes: {dict(sorted(train.classes.items()))}), so the model could never predict them. Add more "
            "examples of those classes (the split is a hash of each example's id), then run again.")
    warnings = []
    for split, split_facts in sorted(facts.items()):
        absent = sorted(all_classes - set(split_facts.classes))
        if split != "train" and absent:
            warnings.append(f"class(es) {absent} have no example in the {split} split: they are not evaluated")
    return warnings

"""ExampleValidator that stops the pipeline when the data does not match the schema.

TFX's ExampleValidator only records anomalies; nothing downstream reads them, so a run
with drifted data would still train and push. This executor raises instead, with the
anomalies in plain words and where the full report is, and the graph makes Transform
wait for it, so nothing is trained on data that fails validation.
"""
import logging
import os
from typing import Any

from stackenv import compat
from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.components import ExampleValidator
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils

from components import split_check

log = logging.getLogger(__name__)


class DataAnomaliesError(ProjectError):
    """The examples do not match the schema; the message lists the anomalies."""

    exit_code = EXIT_PIPELINE_FAILED  # the run started and stopped at a component


def describe_anomalies(by_split: dict[str, anomalies_pb2.Anomalies]) -> list[str]:
    lines = []
    for split, anomalies in sorted(by_split.items()):
        for feature, info in sorted(anomalies.anomaly_info.items()):
            text = info.description or info.short_description
            lines.append(f"[{split}] feature '{feature}': {text}")
        if anomalies.HasField("dataset_anomaly_info"):
            info = anomalies.dataset_anomaly_info
            lines.append(f"[{split}] whole data set: {info.description or info.short_description}")
    return lines


def _check_splits(input_dict: dict[str, list[types.Artifact]]) -> None:
    statistics = input_dict["statistics"][0]
    facts = split_check.read_split_facts(statistics.uri, artifact_utils.decode_split_names(statistics.split_names))
    for warning in split_check.check_splits(facts):
        log.warning("Data: %s.", warning)


class Executor(compat.AnomalyHookValidatorExecutor):
    fail_on_anomalies = True

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        self._found: dict[str, anomalies_pb2.Anomalies] = {}
        self._report_paths: list[str] = []
        _check_splits(input_dict)  # an empty split would also show up as anomalies, less clearly
        result = super().Do(input_dict, output_dict, exec_properties)
        if self._found and self.fail_on_anomalies:
            listing = "\n  - ".join(describe_anomalies(self._found))
            raise DataAnomaliesError(
                "The data does not match the pinned schema; the run stops before training.\n  - "
                f"{listing}\nFull report: {', '.join(self._report_paths)}\n"
                "If this change is intended (new classes, a new source), re-run with "
                "--accept-schema-change to re-infer and pin the schema from this data.")
        return result

    def on_split_validated(self, anomalies: anomalies_pb2.Anomalies, split_dir: str) -> None:
        if anomalies.anomaly_info or anomalies.HasField("dataset_anomaly_info"):
            self._found[os.path.basename(split_dir.rstrip("/")).replace("Split-", "")] = anomalies
            self._report_paths.append(split_dir)


class SplitCheckExecutor(Executor):
    fail_on_anomalies = False  # the schema was just inferred from this data: anomalies are only recorded


class StrictExampleValidator(ExampleValidator):
    """ExampleValidator whose execution fails on any anomaly, and on an empty or class-less split."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)


class SplitCheckingExampleValidator(ExampleValidator):
    """TFX's ExampleValidator (anomalies recorded, not fatal) that fails on an empty or class-less split."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(SplitCheckExecutor)

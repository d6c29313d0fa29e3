"""ExampleValidator that stops the pipeline when the data does not match the schema.

TFX's ExampleValidator only records anomalies; nothing downstream reads them, so a run
with drifted data would still train and push. This executor raises instead, with the
anomalies in plain words and where the full report is, and the graph makes Transform
wait for it, so nothing is trained on data that fails validation.
"""
import os
from typing import Any

from stackenv import compat
from stackenv.errors import EXIT_PIPELINE_FAILED, ProjectError

from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.components import ExampleValidator
from tfx.dsl.components.base import executor_spec


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


class Executor(compat.AnomalyHookValidatorExecutor):
    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        self._found: dict[str, anomalies_pb2.Anomalies] = {}
        self._report_paths: list[str] = []
        result = super().Do(input_dict, output_dict, exec_properties)
        if self._found:
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


class StrictExampleValidator(ExampleValidator):
    """ExampleValidator whose execution fails on any anomaly."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

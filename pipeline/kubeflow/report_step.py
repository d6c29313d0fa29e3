"""What a KFP user sees of a run in the KFP UI: metrics, the confusion matrix and a short report.

KFP's frontend draws a step's output artifacts by their exact type title
(frontend/src/components/viewers/MetricsVisualizations.tsx, CompareV2.tsx): ``system.Metrics``
as a table of its scalar metadata, ``system.ClassificationMetrics`` as a confusion matrix
from its ``confusionMatrix`` metadata (``annotationSpecs`` + ``rows``), ``system.HTML`` and
``system.Markdown`` as the one file at the artifact's URI; each under its ``display_name``.
TFX's artifacts (``tfx.ModelEvaluation``) are none of these, so the compiled pipeline gets one
more step after the Evaluator (``REPORT_TASK``, same image, ``python -m
pipeline.kubeflow.report_step``), for both families:

- ``metrics`` (system.Metrics): the candidate's overall metrics from the TFMA result, and
  ``blessed`` (1/0);
- ``confusion_matrix`` (system.ClassificationMetrics): families whose classes are a
  vocabulary (the image family), from TFMA's MultiClassConfusionMatrixPlot, class names from
  the Transform graph;
- ``report`` (system.Markdown): the gate's verdict and reasons, candidate vs served model.

A container step reports output metadata through the ExecutorOutput file KFP names in
``outputs.outputFile`` (backend 2.3.0 ``src/v2/component/launcher_v2.go``
uploadOutputArtifacts merges it into the recorded artifact). The Markdown goes to the output
URI as the TFX steps write theirs, through ``tf.io.gfile``. The step reads only the Evaluator's
outputs (and the Transform graph for class names): it adds no model loading to a run.
"""
from __future__ import annotations

import math
import os

REPORT_TASK = "EvaluationReport"
MODULE = "pipeline.kubeflow.report_step"
EVALUATOR_TASK = "Evaluator"
TRANSFORM_TASK = "Transform"
METRICS, CONFUSION_MATRIX, REPORT = "metrics", "confusion_matrix", "report"
UI_TYPES = {METRICS: "system.Metrics", CONFUSION_MATRIX: "system.ClassificationMetrics", REPORT: "system.Markdown"}
DISPLAY_NAMES = {METRICS: "Evaluation metrics (overall)", CONFUSION_MATRIX: "Confusion matrix (overall)",
                 REPORT: "Evaluation report"}
CONFUSION_MATRIX_PLOT = "multiClassConfusionMatrixAtThresholds"


def _ui_type(title: str) -> dict:
    return {"artifactType": {"schemaTitle": title, "schemaVersion": "0.0.1"}}


def add_report_step(spec: dict, family: str, with_confusion_matrix: bool) -> dict:
    """Add ``REPORT_TASK`` after the Evaluator of ``spec`` (in place); returns ``spec``."""
    tasks, components = spec["root"]["dag"]["tasks"], spec["components"]
    executors = spec["deploymentSpec"]["executors"]
    if EVALUATOR_TASK not in tasks:
        return spec
    evaluator = tasks[EVALUATOR_TASK]
    evaluator_outputs = components[evaluator["componentRef"]["name"]]["outputDefinitions"]["artifacts"]
    image = executors[components[evaluator["componentRef"]["name"]]["executorLabel"]]["container"]["image"]
    inputs = {"evaluation": (EVALUATOR_TASK, "evaluation", evaluator_outputs["evaluation"]),
              "blessing": (EVALUATOR_TASK, "blessing", evaluator_outputs["blessing"])}
    if with_confusion_matrix:
        transform = components[tasks[TRANSFORM_TASK]["componentRef"]["name"]]["outputDefinitions"]["artifacts"]
        inputs["transform_graph"] = (TRANSFORM_TASK, "transform_graph", transform["transform_graph"])
    outputs = [METRICS, *([CONFUSION_MATRIX] if with_confusion_matrix else []), REPORT]
    label = f"{REPORT_TASK}_executor"
    components[REPORT_TASK] = {
        "executorLabel": label,
        "inputDefinitions": {"artifacts": {key: dict(declared) for key, (_, _, declared) in inputs.items()},
                             "parameters": {"family": {"parameterType": "STRING"}}},
        "outputDefinitions": {"artifacts": {key: _ui_type(UI_TYPES[key]) for key in outputs}},
    }
    executors[label] = {"container": {"image": image, "command": ["python", "-m", MODULE],
                                      "args": ["--executor-input", "{{$}}"]}}
    tasks[REPORT_TASK] = {
        "taskInfo": {"name": REPORT_TASK},
        "componentRef": {"name": REPORT_TASK},
        "dependentTasks": sorted({producer for producer, _, _ in inputs.values()}),
        "cachingOptions": dict(evaluator.get("cachingOptions", {"enableCache": True})),
        "inputs": {"artifacts": {key: {"taskOutputArtifact": {"producerTask": producer, "outputArtifactKey": output}}
                                 for key, (producer, output, _) in inputs.items()},
                   "parameters": {"family": {"runtimeValue": {"constant": family}}}},
    }
    return spec


# ----------------------------------------------------------------------------- the step


def headline_metrics(evaluation_uri: str, blessed: bool) -> dict[str, float]:
    """The candidate's finite overall scalar metrics (no diffs), and ``blessed``."""
    from artifacts import tfma_results

    overall = tfma_results.find_slice(tfma_results.load_result(evaluation_uri), "overall")
    values = {name: value for name, value in tfma_results.slice_scalars(overall).items() if math.isfinite(value)}
    return {**values, "blessed": 1.0 if blessed else 0.0}


def confusion_matrix(evaluation_uri: str, class_names: list[str]) -> dict:
    """KFP's ``confusionMatrix`` (rows: actual class, columns: predicted) from TFMA's plot."""
    from artifacts import tfma_results

    entries = []
    for slice_key, by_output in tfma_results.load_result(evaluation_uri).plots or []:
        if not slice_key:
            for by_sub_key in by_output.values():
                plot = by_sub_key.get("", {}).get(CONFUSION_MATRIX_PLOT)
                if plot and plot.get("matrices"):
                    entries = plot["matrices"][0].get("entries", [])
    size = max([len(class_names)] + [max(e.get("actualClassId", 0), e.get("predictedClassId", 0)) + 1
                                      for e in entries])
    rows = [[0] * size for _ in range(size)]
    for entry in entries:
        actual, predicted = entry.get("actualClassId", 0), entry.get("predictedClassId", 0)
        if actual >= 0 and predicted >= 0:  # -1: no prediction above the threshold
            rows[actual][predicted] += int(round(entry.get("numWeightedExamples", 0.0)))
    names = [class_names[i] if i < len(class_names) else str(i) for i in range(size)]
    return {"annotationSpecs": [{"displayName": name} for name in names], "rows": [{"row": row} for row in rows]}


def class_names(transform_graph_uri: str, vocabulary: str) -> list[str]:
    import tensorflow_transform as tft

    names = tft.TFTransformOutput(transform_graph_uri).vocabulary_by_name(vocabulary)
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def markdown_report(evaluation_uri: str, family: str, blessed: bool, metrics: dict[str, float]) -> str:
    """The gate's verdict with its reasons, and the candidate against the served model."""
    from artifacts import tfma_results
    from pipeline.families import get_family

    gate = get_family(family).gate_metric
    lines = [f"# Evaluation: {family}", "",
             f"**{'Blessed' if blessed else 'Not blessed'}** on `{gate}` "
             f"(overall: {metrics.get(gate, math.nan):.4f}).", ""]
    failures = tfma_results.validation_failures(evaluation_uri) if not blessed else []
    lines += [f"- {reason}" for reason in failures] + ([""] if failures else [])
    overall = tfma_results.find_slice(tfma_results.load_result(evaluation_uri), "overall")
    diffs = tfma_results.slice_diffs(overall)
    has_baseline = tfma_results.evaluated_models(evaluation_uri)["baseline"] is not None
    served = (tfma_results.slice_scalars(tfma_results.find_slice(tfma_results.load_result(evaluation_uri, "baseline"),
                                                                 "overall")) if has_baseline else {})
    lines += ["| metric | this model | served model | change |", "| --- | ---: | ---: | ---: |"]
    for name, value in sorted(tfma_results.slice_scalars(overall).items()):
        other = served.get(name)
        change = diffs.get(name)
        lines.append(f"| {name} | {value:.4f} | {'' if other is None else f'{other:.4f}'} | "
                     f"{'' if change is None else f'{change:+.4f}'} |")
    if not has_baseline:
        lines += ["", "Nothing was served when this model was evaluated: no comparison."]
    return "\n".join(lines) + "\n"


def _write(uri: str, text: str) -> None:
    import tensorflow as tf

    tf.io.gfile.makedirs(os.path.dirname(uri.rstrip("/")))
    with tf.io.gfile.GFile(uri, "w") as handle:
        handle.write(text)


def run(executor_input: dict) -> dict:
    """Write the UI artifacts; returns the ExecutorOutput that names their metadata."""
    from pipeline.families import get_family

    inputs, outputs = executor_input["inputs"], executor_input["outputs"]["artifacts"]
    family = inputs["parameterValues"]["family"]
    evaluation = inputs["artifacts"]["evaluation"]["artifacts"][0]["uri"]
    blessing = inputs["artifacts"]["blessing"]["artifacts"][0]
    blessed = bool((blessing.get("metadata") or {}).get("blessed"))
    metrics = headline_metrics(evaluation, blessed)
    metadata: dict[str, dict] = {METRICS: metrics}
    if CONFUSION_MATRIX in outputs:
        graph = inputs["artifacts"]["transform_graph"]["artifacts"][0]["uri"]
        vocabulary = get_family(family).class_vocabulary
        metadata[CONFUSION_MATRIX] = {"confusionMatrix": confusion_matrix(
            evaluation, class_names(graph, vocabulary) if vocabulary else [])}
    report = markdown_report(evaluation, family, blessed, metrics)
    _write(outputs[REPORT]["artifacts"][0]["uri"], report)
    metadata[REPORT] = {}
    result = {}
    for key, values in metadata.items():
        artifact = outputs[key]["artifacts"][0]
        result[key] = {"artifacts": [{**artifact, "metadata": {
            **(artifact.get("metadata") or {}), **values, "display_name": DISPLAY_NAMES[key]}}]}
    print(report)
    return {"artifacts": result}


def main(argv: list[str] | None = None) -> int:
    import stackenv  # noqa: F401 - the TF/TFX environment first

    from pipeline.kubeflow.step_io import run_step

    return run_step(run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    from stackenv.compat import exit_skipping_teardown

    exit_skipping_teardown(main())  # tensorflow-io's S3 client aborts in interpreter teardown

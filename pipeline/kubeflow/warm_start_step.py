"""Warm start on Kubeflow: a step that hands the Trainer the served model, in place of TFX's Resolver.

``run --warm-start`` puts TFX's latest-blessed-model Resolver in front of the Trainer
(pipeline/warm_start.py). TFX's V2 compiler turns it into two tasks whose executors are
``resolver.outputArtifactQueries``, which only Vertex AI runs: a KFP 2.x backend fails the run
("resolver not implemented yet", backend ``src/v2/driver/driver.go``). So ``compile
--warm-start`` replaces those tasks with one container step (``WARM_START_TASK``, same image,
``python -m pipeline.kubeflow.warm_start_step``) that finds the latest blessed model itself,
as the Evaluator finds its baseline (components/evaluator.py): the newest version in the
serving directory, where the Pusher puts only blessed models. It copies that SavedModel into
its ``model`` output as ``Format-Serving`` (the layout TFX's ``fn_args.base_model`` reads), so
the Trainer's ``base_model`` input is an ordinary upstream Model artifact. Its KFP cache is off:
the serving directory changes between runs.

Nothing served yet (the first run): the output is an empty Model whose metadata says so
(``SOURCE_KEY`` empty), and the Trainer's container entrypoint drops it from the Trainer's
inputs (``drop_missing_base_model``), so the family's ``run_fn`` sees no base model and trains
from scratch with the reason "no blessed model of this pipeline yet", as a local first run does.
"""
from __future__ import annotations

import os

from pipeline.kubeflow.storage import KubeflowConfigError

WARM_START_TASK = "LatestServedModel"
MODULE = "pipeline.kubeflow.warm_start_step"
SOURCE_KEY = "warm_start_source"  # the served version copied, "" for none
SERVING_DIR = "serving_dir"
BASE_MODEL = "base_model"  # the Trainer's input (TFX standard_component_specs.BASE_MODEL_KEY)


def _resolver_tasks(spec: dict) -> list[str]:
    executors = spec["deploymentSpec"]["executors"]
    return sorted(name for name, task in spec["root"]["dag"]["tasks"].items()
                  if "resolver" in executors.get(spec["components"][task["componentRef"]["name"]]
                                                 .get("executorLabel", ""), {}))


def replace_resolvers(spec: dict, serving_dir: str, image: str) -> dict:
    """The warm-start Resolver tasks of ``spec`` replaced by ``WARM_START_TASK`` (in place).

    Any other Resolver is refused: no KFP 2.x backend runs one.
    """
    resolvers = _resolver_tasks(spec)
    if not resolvers:
        return spec
    tasks, components, executors = spec["root"]["dag"]["tasks"], spec["components"], spec["deploymentSpec"]["executors"]
    consumers = [(name, key) for name, task in tasks.items() if name not in resolvers
                 for key, source in task.get("inputs", {}).get("artifacts", {}).items()
                 if source.get("taskOutputArtifact", {}).get("producerTask") in resolvers]
    if not consumers or any(key != BASE_MODEL for _, key in consumers):
        raise KubeflowConfigError(
            f"The compiled pipeline has Resolver tasks ({', '.join(resolvers)}) feeding "
            f"{', '.join(f'{n}.{k}' for n, k in consumers) or 'nothing'}; a KFP 2.x backend cannot run a Resolver "
            "('resolver not implemented yet') and only the warm-start one has a replacement here.")
    model_type = None
    for name in resolvers:
        component = components.pop(tasks.pop(name)["componentRef"]["name"])
        executors.pop(component["executorLabel"], None)
        model_type = component.get("outputDefinitions", {}).get("artifacts", {}).get("model", {}).get(
            "artifactType", model_type)
    label = f"{WARM_START_TASK}_executor"
    components[WARM_START_TASK] = {
        "executorLabel": label,
        "inputDefinitions": {"parameters": {SERVING_DIR: {"parameterType": "STRING"}}},
        "outputDefinitions": {"artifacts": {"model": {
            "artifactType": model_type or {"instanceSchema": "title: tfx.Model\ntype: object\n"}}}},
    }
    executors[label] = {"container": {"image": image, "command": ["python", "-m", MODULE],
                                      "args": ["--executor-input", "{{$}}"]}}
    tasks[WARM_START_TASK] = {
        "taskInfo": {"name": WARM_START_TASK},
        "componentRef": {"name": WARM_START_TASK},
        "cachingOptions": {"enableCache": False},
        "inputs": {"parameters": {SERVING_DIR: {"runtimeValue": {"constant": serving_dir}}}},
    }
    for name, key in consumers:
        task = tasks[name]
        task["inputs"]["artifacts"][key] = {"taskOutputArtifact": {"producerTask": WARM_START_TASK,
                                                                   "outputArtifactKey": "model"}}
        task["dependentTasks"] = sorted({*(d for d in task.get("dependentTasks", []) if d not in resolvers),
                                         WARM_START_TASK})
    return spec


def drop_missing_base_model(executor_input: dict) -> bool:
    """Remove a ``base_model`` input that holds no model (in place); True if removed."""
    artifacts = executor_input.get("inputs", {}).get("artifacts", {})
    given = (artifacts.get(BASE_MODEL) or {}).get("artifacts") or []
    if given and SOURCE_KEY in (given[0].get("metadata") or {}) and not given[0]["metadata"][SOURCE_KEY]:
        del artifacts[BASE_MODEL]
        return True
    return False


def run(executor_input: dict) -> dict:
    """Copy the newest served version into the ``model`` output; returns the ExecutorOutput."""
    from artifacts.serving_dir import copy_tree, latest_version_dir

    serving_dir = executor_input["inputs"]["parameterValues"][SERVING_DIR]
    output = executor_input["outputs"]["artifacts"]["model"]["artifacts"][0]
    source = latest_version_dir(serving_dir) or ""
    if source:
        copy_tree(source, os.path.join(output["uri"], "Format-Serving"))
        print(f"Warm start: the Trainer starts from {source}, the newest served version.")
    else:
        print(f"Warm start: nothing served in {serving_dir} yet; the Trainer trains from scratch.")
    return {"artifacts": {"model": {"artifacts": [{**output, "metadata": {
        **(output.get("metadata") or {}), SOURCE_KEY: source}}]}}}


def main(argv: list[str] | None = None) -> int:
    import stackenv  # noqa: F401 - the TF/TFX environment first

    from pipeline.kubeflow.step_io import run_step

    return run_step(run, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    from stackenv.compat import exit_skipping_teardown

    exit_skipping_teardown(main())  # tensorflow-io's S3 client aborts in interpreter teardown

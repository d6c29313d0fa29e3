"""Fresh data is never served stale from KFP's cache: the compiled ExampleGen's key includes its input.

How a KFP 2.x backend caches a step (kubeflow/pipelines 2.3.0, the same in 2.2-2.5):
``backend/src/v2/driver/driver.go`` getFingerPrint builds the key with
``backend/src/v2/cacheutils/cache.go`` GenerateCacheKey from the step's input artifact names,
its input parameter values, its output artifact specs (URI wiped) and output parameter types,
and its container image, command and args; the driver looks the key up only when the task's
``cachingOptions.enableCache`` is true (getFingerPrintsAndID, Container), and a hit reuses the
cached execution's output artifacts (reuseCachedOutputs), so every step downstream sees the
same artifact names and hits its cache too. An ExampleGen whose parameters are only the data
URI and the split pattern therefore hits the cache after new files arrive at that URI; TFX's
own remedy, the driver in ``lifecycle.preCacheCheck``, runs only on Vertex AI.

So the compiled pipeline gets a step before the ExampleGen (``RESOLVE_TASK``, caching off for
that task alone, same image) that lists the input and resolves ``{SPAN}``
(pipeline/kubeflow/resolve_input.py), and the ExampleGen takes the step's outputs as input
parameters (``taskOutputParameter``, resolved by driver.go resolveInputs from the producer's
recorded outputs): the resolved ``input_config`` in place of the constant one, plus
``input_fingerprint``, ``span`` and ``version``. Its key now changes exactly when the listing
does. The container entrypoint hands them to TFX's executor as TFX's driver would
(pipeline/kubeflow/entrypoint.py ``apply_resolved_input``). The ExampleGen's ``preCacheCheck`` hook is
dropped: where it runs it would resolve the already resolved pattern again (span 0).
"""
from __future__ import annotations

import copy
import json

from pipeline.kubeflow.resolve_input import ARGS, COMMAND, INPUTS, OUTPUTS
from pipeline.kubeflow.warm_start_step import WARM_START_TASK

RESOLVE_TASK = "ResolveInput"
#: Tasks whose KFP cache stays off whatever a run or deploy option says (they must always run):
#: the input listing, the warm-start step (the serving directory changes between runs), and the listing of
#: a ``--score`` folder (components/scoring.py: new files there must be scored; pipeline.graph's
#: SCORING_EXAMPLE_GEN, spelled here so that deploy loads no TFX; tests/test_kubeflow_compile.py checks both agree).
SCORING_TASK = "ScoringExampleGen"
NEVER_CACHED = frozenset({RESOLVE_TASK, WARM_START_TASK, SCORING_TASK})
INPUTS_SPEC_FLAG = "--json_serialized_inputs_spec_args"


def _example_gen_tasks(spec: dict) -> list[str]:
    """Tasks of a file-based ExampleGen: the ones taking ``input_base`` and ``input_config``."""
    tasks = spec["root"]["dag"]["tasks"]
    found = []
    for name, task in tasks.items():
        declared = spec["components"][task["componentRef"]["name"]].get("inputDefinitions", {})
        if {"input_base", "input_config"} <= set(declared.get("parameters", {})):
            found.append(name)
    return found


def add_input_resolution(spec: dict) -> dict:
    """Add the input-resolution step before the ExampleGen of ``spec`` (in place; returns it); the
    ``--score`` folder's ExampleGen, if any, uncached (it lists its folder itself)."""
    scoring = spec["root"]["dag"]["tasks"].get(SCORING_TASK)
    if scoring is not None:
        scoring["cachingOptions"] = {"enableCache": False}
    example_gens = _example_gen_tasks(spec)
    if not example_gens:
        return spec
    if len(example_gens) > 1 or RESOLVE_TASK in spec["root"]["dag"]["tasks"]:
        raise ValueError(f"expected one file-based ExampleGen without {RESOLVE_TASK}, found {example_gens}")
    name = example_gens[0]
    tasks, components = spec["root"]["dag"]["tasks"], spec["components"]
    task = tasks[name]
    component = components[task["componentRef"]["name"]]
    executors = spec["deploymentSpec"]["executors"]
    container = executors[component["executorLabel"]]["container"]
    declared = component["inputDefinitions"]["parameters"]
    given = task["inputs"]["parameters"]

    label = f"{RESOLVE_TASK}_executor"
    components[RESOLVE_TASK] = {
        "executorLabel": label,
        "inputDefinitions": {"parameters": {k: copy.deepcopy(declared[k]) for k in INPUTS if k in declared}},
        "outputDefinitions": {"parameters": {k: {"parameterType": t} for k, t in OUTPUTS.items()}},
    }
    executors[label] = {"container": {"image": container["image"], "command": list(COMMAND), "args": list(ARGS)}}
    tasks[RESOLVE_TASK] = {
        "taskInfo": {"name": RESOLVE_TASK},
        "componentRef": {"name": RESOLVE_TASK},
        "cachingOptions": {"enableCache": False},
        "inputs": {"parameters": {k: copy.deepcopy(given[k]) for k in INPUTS if k in given}},
    }

    for key, kind in OUTPUTS.items():
        given[key] = {"taskOutputParameter": {"producerTask": RESOLVE_TASK, "outputParameterKey": key}}
        declared[key] = {"parameterType": kind}
    task["dependentTasks"] = sorted({*task.get("dependentTasks", []), RESOLVE_TASK})
    container.pop("lifecycle", None)
    args = container["args"]
    if INPUTS_SPEC_FLAG in args:  # TFX's entrypoint reads parameter types from this copy
        at = args.index(INPUTS_SPEC_FLAG) + 1
        inputs_spec = json.loads(args[at])
        inputs_spec.setdefault("parameters", {}).update({k: {"parameterType": t} for k, t in OUTPUTS.items()})
        args[at] = json.dumps(inputs_spec, indent=2, sort_keys=True)
    return spec


def override_caching(spec: dict, enabled: bool) -> dict:
    """Every task's ``cachingOptions`` set to ``enabled``, except ``NEVER_CACHED`` (off). In place."""
    for name, task in spec["root"]["dag"]["tasks"].items():
        task["cachingOptions"] = {"enableCache": bool(enabled) and name not in NEVER_CACHED}
    return spec

"""TFX's Tuner with a record of the search: each trial's time, the untuned score, the budget.

TFX's Tuner executor writes the best hyperparameters (the ``best_hyperparameters`` output,
which the Trainer reads as ``fn_args.hyperparameters``) and each completed trial's settings
and score (``tuner_results.json``). The summary and the report also need how long each trial
took, what the untuned defaults scored and whether the wall-time budget ended the search;
this executor adds them (``seconds`` per trial row, and ``search.json`` beside it) from the
attributes ``models/common/tuner.py``'s ``BudgetedTuner`` keeps. A tuner without them still
runs: the extra fields are then empty.

When the untuned defaults scored better than every trial, the best-hyperparameters file
holds no values (``"untuned_defaults": true``), so the Trainer trains with its defaults
instead of the best of a worse lot (seen on the text corpus: benchmarks/README.md, "Tuning").
"""
import json
import os
from typing import Any

from tfx import types
from tfx.components.tuner import executor as tuner_executor
from tfx.components.tuner.component import Tuner
from tfx.dsl.components.base import executor_spec
from tfx.types import artifact_utils, standard_component_specs
from tfx.utils import io_utils

from artifacts.search_record import BEST_FILE, RESULTS_FILE, SEARCH_FILE
from components.facts_steps import with_graph_facts


class Executor(tuner_executor.Executor):
    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        if tuner_executor.get_tune_args(exec_properties):
            raise ValueError("TuneArgs is not supported by this Tuner's Executor.")
        # A graph compiled without reading the data left the image shape etc. empty (facts_steps.py).
        exec_properties, _ = with_graph_facts(input_dict, exec_properties)
        results_dir = artifact_utils.get_single_uri(output_dict[standard_component_specs.TUNER_RESULTS_KEY])
        tuner = tuner_executor.search(input_dict, exec_properties, _working_dir(exec_properties, results_dir)
                                      or self._get_tmp_dir(), print_tuning_summary=False)
        tuner_executor.write_best_hyperparameters(tuner, output_dict)
        best_dir = artifact_utils.get_single_uri(output_dict[standard_component_specs.BEST_HYPERPARAMETERS_KEY])
        write_search_record(tuner, results_dir, best_dir)


def _working_dir(exec_properties: dict[str, Any], results_dir: str) -> str | None:
    """A search whose trials run in other pods (compile --tune-workers: kubeflow/training/tuner_launcher.py) needs a
    working directory they share: under ``tuner_results`` in the pipeline root, not the step's local temp."""
    custom = json.loads(exec_properties.get(standard_component_specs.CUSTOM_CONFIG_KEY) or "null") or {}
    return os.path.join(results_dir, "search") if custom.get("shared_working_dir") else None


def write_search_record(tuner, results_dir: str, best_dir: str) -> dict[str, Any]:
    """Add each trial's seconds to TFX's rows, write ``search.json``, and hand the Trainer the
    untuned defaults when they beat every trial (see the module docstring)."""
    seconds = dict(getattr(tuner, "trial_seconds", {}) or {})
    path = os.path.join(results_dir, RESULTS_FILE)
    rows = json.loads(io_utils.read_string_file(path))
    for row in rows:
        row["seconds"] = seconds.get(row["trial_id"])
    io_utils.write_string_file(path, json.dumps(rows))
    best = tuner.oracle.get_best_trials(1)
    record: dict[str, Any] = {
        "algorithm": type(tuner.oracle).__name__,
        "trials_completed": len(rows),
        "trials_run": len(seconds),
        "best_trial": best[0].trial_id if best else None,
        "best_score": best[0].score if best else None,
        "best_values": {k: v for k, v in (best[0].hyperparameters.values if best else {}).items()
                        if not k.startswith("tuner/")},
        "default_score": getattr(tuner, "default_score", None),
        "default_seconds": getattr(tuner, "default_seconds", None),
        "budget_seconds": getattr(tuner, "budget_seconds", None),
        "stopped_by_budget": bool(getattr(tuner, "stopped_by_budget", False)),
        "search_seconds": sum(seconds.values()) + (getattr(tuner, "default_seconds", None) or 0.0),
    }
    record["defaults_won"] = bool(record["default_score"] is not None and record["best_score"] is not None
                                  and record["default_score"] > record["best_score"])
    if record["defaults_won"]:
        best_path = os.path.join(best_dir, BEST_FILE)
        config = json.loads(io_utils.read_string_file(best_path))
        io_utils.write_string_file(best_path, json.dumps({**config, "values": {}, "untuned_defaults": True}))
    io_utils.write_string_file(os.path.join(results_dir, SEARCH_FILE), json.dumps(record, indent=2, sort_keys=True))
    return record


class RecordingTuner(Tuner):
    """TFX's Tuner component (same inputs, outputs and ``tuner_fn``) with :class:`Executor`."""

    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

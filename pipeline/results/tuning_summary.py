"""The run summary's lines about a hyperparameter search, read from the Tuner's outputs.

``components/tuner.py`` writes ``search.json`` (best trial, the untuned defaults' score on
the same trial budget, whether the wall-time budget ended it) beside TFX's
``tuner_results.json``; a cached Tuner's outputs are the same files, so a fully cached
re-run prints the same lines.
"""
import os
from typing import Any

from artifacts.search_record import BEST_FILE, read_search_results
from pipeline.results import mlmd


def read_search(tuner: mlmd.NodeExecution | None) -> dict[str, Any] | None:
    """``search.json`` with the trials (``tuner_results.json`` rows) and the best file's path."""
    if tuner is None or not tuner.outputs.get("tuner_results"):
        return None
    search = read_search_results(tuner.outputs["tuner_results"][0].uri)
    if search is None:
        return None
    if tuner.outputs.get("best_hyperparameters"):
        search["best_file"] = os.path.join(tuner.outputs["best_hyperparameters"][0].uri, BEST_FILE)
    return search


def _value(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def lines(search: dict[str, Any] | None, imported: mlmd.NodeExecution | None, metric_label: str) -> list[str]:
    if imported is not None and imported.outputs.get("result"):
        return [f"Hyperparameters: imported from {imported.outputs['result'][0].uri} (no search)"]
    if not search:
        return []
    algorithm = search.get("algorithm", "").replace("Oracle", "")
    out = [f"Tuning: {search.get('trials_completed', 0)} trials ({algorithm}, {search.get('search_seconds', 0):.1f} s)"
           f"; scored by {metric_label.lower()} on held-out train examples"]
    best, default = search.get("best_score"), search.get("default_score")
    if search.get("defaults_won"):
        out.append(f"  the untuned defaults scored best ({default:.4f}; best trial {search.get('best_trial')}: "
                   f"{best:.4f}): trained with the defaults")
    elif best is not None:
        versus = f" vs {default:.4f} with the untuned defaults" if default is not None else ""
        out.append(f"  best trial {search.get('best_trial')}: {best:.4f}{versus}; trained with "
                   + ", ".join(f"{k}={_value(v)}" for k, v in sorted((search.get("best_values") or {}).items())))
    if search.get("stopped_by_budget"):
        out.append(f"  the --tune-budget of {search.get('budget_seconds', 0) / 60:.4g} min ran out after "
                   f"{search.get('trials_run')} trials: the best trial so far was used")
    if search.get("best_file"):
        out.append(f"  reuse without searching: --hyperparameters {search['best_file']}")
    return out

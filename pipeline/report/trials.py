"""The report's hyperparameter-search section: every trial (settings, score, time) and a
plot of score by trial, for the search whose best values trained the evaluated model.

Found through MLMD lineage, so the section always belongs to the model on the page: the
candidate Model -> the Trainer that produced it -> its ``hyperparameters`` input -> the
Tuner that produced that -> the Tuner's results (``components/tuner.py``). A model trained
without a search (or with ``--hyperparameters FILE``) gets no section.
"""
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from artifacts.search_record import read_search_results
from pipeline.results import mlmd

SECTION_ID = "tuning-trials"


def search_of_model(store, model_uri: str | None) -> dict[str, Any] | None:
    """``search.json`` plus its ``trials`` rows, for the search behind this model; None without one."""
    if not model_uri:
        return None
    for model in store.get_artifacts_by_uri(model_uri):
        for trainer in mlmd.linked_executions(store, model.id, mlmd.OUTPUTS):
            for hyperparameters in mlmd.artifacts_by_key(store, trainer.id, mlmd.INPUTS).get("hyperparameters", []):
                for tuner in mlmd.linked_executions(store, hyperparameters.id, mlmd.OUTPUTS):
                    results_uri = mlmd.first_uri(mlmd.artifacts_by_key(store, tuner.id), "tuner_results")
                    search = read_search_results(results_uri) if results_uri else None
                    if search is not None:
                        return search
    return None


def trials_frame(search: dict[str, Any]) -> pd.DataFrame:
    """One row per completed trial in trial order, then the untuned defaults' row."""
    rows = []
    for trial in sorted(search.get("trials") or [], key=lambda t: int(t["trial_id"]) if t["trial_id"].isdigit()
                        else t["trial_id"]):
        settings = {k: v for k, v in trial.items() if k not in ("trial_id", "score", "seconds")}
        rows.append({"trial": trial["trial_id"], "score": trial["score"],
                     "seconds": trial.get("seconds") if trial.get("seconds") is not None else float("nan"),
                     "best": ("best" + ("" if search.get("defaults_won") else " (trained)")
                              if trial["trial_id"] == search.get("best_trial") else ""),
                     "settings": ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                           for k, v in sorted(settings.items()))})
    if search.get("default_score") is not None:
        rows.append({"trial": "untuned defaults", "score": search["default_score"],
                     "seconds": search.get("default_seconds") or float("nan"),
                     "best": "best (trained)" if search.get("defaults_won") else "",
                     "settings": "the family's defaults"})
    return pd.DataFrame(rows, columns=["trial", "score", "seconds", "best", "settings"])


def plot_trials(frame: pd.DataFrame) -> Figure:
    """Score by trial (dots, best in red); the untuned defaults' score as a dashed line."""
    trials = frame[frame["trial"] != "untuned defaults"]
    figure = Figure(figsize=(7, 3))
    axes = figure.add_subplot()
    colors = ["#d62728" if best else "#4c72b0" for best in trials["best"]]  # best trial in red
    axes.scatter(range(len(trials)), trials["score"], color=colors, zorder=3)
    axes.plot(range(len(trials)), trials["score"], color="#bbbbbb", zorder=2)
    defaults = frame.loc[frame["trial"] == "untuned defaults", "score"]
    if len(defaults):
        axes.axhline(float(defaults.iloc[0]), linestyle="--", color="#555555", label="untuned defaults")
        axes.legend(loc="lower right")
    axes.set_xticks(range(len(trials)), [str(t) for t in trials["trial"]])
    axes.set_xlabel("trial")
    axes.set_ylabel("score (held-out train)")
    axes.set_title("Score by trial")
    return figure


def section_parts(output_dir: str, model_uri: str | None) -> tuple[str, pd.DataFrame, Figure] | None:
    """(note, trials table, plot) of the model's search, or None; ``page.py`` renders them."""
    search = search_of_model(mlmd.open_output_store(output_dir), model_uri)
    if not search:
        return None
    frame = trials_frame(search)
    note = (f"{search.get('trials_completed', 0)} trials ({str(search.get('algorithm', '')).replace('Oracle', '')}"
            f", {search.get('search_seconds', 0):.1f} s), each scored on held-out TRAIN examples after the same "
            "training steps; the Trainer then trained the best one fully. Compared with the untuned defaults "
            "on the same budget.")
    if search.get("stopped_by_budget"):
        note += " The wall-time budget (--tune-budget) ended the search: the best trial so far was used."
    return note, frame, plot_trials(frame)

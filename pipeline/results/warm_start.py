"""The run summary's ``Warm start:`` line: whether the Trainer started from the latest blessed model
(pipeline/warm_start.py adds the Resolver; models/common/warm_start.py records the decision)."""
import os

from pipeline.results import mlmd


def _record(model_uri: str | None) -> dict | None:
    from models.common.warm_start import read_record

    return read_record(os.path.join(model_uri, "Format-Serving")) if model_uri else None


def _pushed_version(store, source: str) -> str | None:
    """The serving version the source model was pushed as, found through MLMD, or None."""
    model_uri = source[:-len("/Format-Serving")] if source.endswith("/Format-Serving") else source
    for model in store.get_artifacts_by_uri(model_uri):
        for execution in mlmd.linked_executions(store, model.id, mlmd.INPUTS):
            for pushed in mlmd.artifacts_by_key(store, execution.id).get("pushed_model", []):
                destination = mlmd.pushed_destination(pushed)
                if destination:
                    return os.path.basename(destination.rstrip("/"))
    return None


def summary_line(model_uri: str | None, store=None) -> str | None:
    """``Warm start: ...`` for the run summary, or None when the run did not ask for it."""
    decision = (_record(model_uri) or {}).get("warm_start") or {}
    if not decision.get("requested"):
        return None
    source = decision.get("source")
    if not source:
        return f"Warm start: no, trained from scratch ({decision.get('note', 'no reason recorded')})"
    version = _pushed_version(store, source) if store is not None else None
    pushed = f"served version {version}, " if version else ""
    return f"Warm start: yes, from the latest blessed model ({pushed}{source})"

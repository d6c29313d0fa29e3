"""Warm start in the pipeline: the Resolver that finds the model to start from, and the summary line.

``run --warm-start`` adds TFX's ``Resolver(LatestBlessedModelStrategy)`` in front of the
Trainer: the newest Model of this pipeline that the Evaluator blessed goes to the
Trainer's ``base_model`` input (``fn_args.base_model``), and the family's ``run_fn``
decides whether its weights fit (models/common/warm_start.py). The first run has none and
trains from scratch. The Resolver reads MLMD of this pipeline only, so another
``--pipeline-name`` (or another family's default pipeline) never seeds it.

Local runs only: on Kubeflow V2 this Resolver compiles to a ``resolver.outputArtifactQueries``
step that only Vertex AI Pipelines implements (the reason the Evaluator reads its baseline
from the serving directory instead, components/evaluator.py), so ``compile`` has no ``--warm-start``.
"""
import os

from pipeline import mlmd

RESOLVER = "LatestBlessedModel"


def latest_blessed_model_resolver():
    """The Resolver node whose ``model`` output feeds Trainer's ``base_model``."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import LatestBlessedModelStrategy
    from tfx.types import Channel, standard_artifacts

    return Resolver(strategy_class=LatestBlessedModelStrategy, model=Channel(type=standard_artifacts.Model),
                    model_blessing=Channel(type=standard_artifacts.ModelBlessing)).with_id(RESOLVER)


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

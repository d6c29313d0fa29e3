"""Warm start in the pipeline: the Resolver that finds the model to start from (its summary line:
pipeline/results/warm_start.py).

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
RESOLVER = "LatestBlessedModel"


def latest_blessed_model_resolver():
    """The Resolver node whose ``model`` output feeds Trainer's ``base_model``."""
    from tfx.dsl.components.common.resolver import Resolver
    from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import LatestBlessedModelStrategy
    from tfx.types import Channel, standard_artifacts

    return Resolver(strategy_class=LatestBlessedModelStrategy, model=Channel(type=standard_artifacts.Model),
                    model_blessing=Channel(type=standard_artifacts.ModelBlessing)).with_id(RESOLVER)

"""The component graph, built from the typed config; knows nothing about runners.

ExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> Transform -> Trainer
-> Evaluator (baseline: the model being served) -> Pusher. Local Beam and Kubeflow
runners both call ``create_pipeline`` and only add their own orchestration settings.
"""
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stackenv.errors import ConfigError

import tensorflow_data_validation as tfdv  # StatisticsGen's options (tfx.components imports it anyway)

# Direct imports, not ``from tfx import v1``: tfx.v1 also loads its cloud extensions
# (google.cloud.aiplatform) on every run, cached ones included (benchmarks/README.md).
from tfx.components import ImportExampleGen, SchemaGen, StatisticsGen
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.orchestration.pipeline import Pipeline
from tfx.proto import example_gen_pb2, trainer_pb2

from components.data_facts import facts_from_manifest, pending_manifest, with_facts
from components.evaluator import ServedBaselineEvaluator
from components.facts_steps import FactsTrainer, FactsTransform
from components.pusher import AtomicPusher
from components.validator import SplitCheckingExampleValidator, StrictExampleValidator
from data.tfrecords import DatasetManifest
from models.common.training import TrainingSettings
from pipeline.config import PipelineConfig
from pipeline.families import FAMILY_KEY, get_family
from pipeline.warm_start import latest_blessed_model_resolver

# Component ids, used by the runners' progress log and the run summary.
EXAMPLE_GEN = "ImportExampleGen"
STATISTICS_GEN = "StatisticsGen"
SCHEMA_GEN = "SchemaGen"
PINNED_SCHEMA = "PinnedSchema"
EXAMPLE_VALIDATOR = "ExampleValidator"
TRANSFORM = "Transform"
TRAINER = "Trainer"
EVALUATOR = "Evaluator"
PUSHER = "Pusher"
TUNER = "Tuner"
HYPERPARAMETERS_IMPORTER = "HyperparametersImporter"
SCORING_EXAMPLE_GEN = "ScoringExampleGen"
BULK_INFERRER = "BulkInferrer"
SCORE_WRITER = "ScoreWriter"

# How a training function executes: ``(dotted function, custom_config) -> (dotted function, custom_config)``.
# The graph calls the family's function inside the step; a runner may hand the work over (Kubeflow
# compile: a launcher that creates a training job, pipeline/kubeflow/training/). The graph only applies it.
FunctionLauncher = Callable[[str, dict], tuple[str, dict]]


def _in_the_step(function: str, custom_config: dict) -> tuple[str, dict]:
    return function, custom_config


@dataclasses.dataclass(frozen=True)
class StepLaunchers:
    """What a runner changes about where the Trainer's ``run_fn`` and the Tuner's ``tuner_fn`` run."""
    trainer: FunctionLauncher = _in_the_step
    tuner: FunctionLauncher = _in_the_step


def create_pipeline(
    config: PipelineConfig,
    dataset: DatasetManifest | None,
    *,
    metadata_connection_config=None,
    beam_pipeline_args: Sequence[str] = (),
    component_beam_args: Mapping[str, Sequence[str]] | None = None,
    launchers: StepLaunchers = StepLaunchers(),
) -> Pipeline:
    """The pipeline of ``config``, the same graph for every runner.

    Args:
        config: the run's settings (pipeline/config.py), checked.
        dataset: the data prepared before the graph (``--ingest prepare``, read by ImportExampleGen), or
            None: the ExampleGen reads ``config.data`` itself and records the data's facts on its Examples.
        metadata_connection_config: the ML Metadata store (local runs); None where the orchestrator has its own.
        beam_pipeline_args: for every Beam-based component.
        component_beam_args: more for single components, by id (they come after ``beam_pipeline_args``).
        launchers: where the Trainer's and the Tuner's functions run; all a runner may change
            (see :class:`StepLaunchers`).
    """
    family = get_family(config.model)
    code_version = family.code_version()
    example_gen, dataset, train_steps, eval_steps = _ingestion(config, family, dataset)
    statistics_gen, schema_gen, pinned_schema, example_validator = _validation(config, example_gen)
    # Known at compile time only for prepared data; else the steps read them from the Examples' properties.
    data_facts = facts_from_manifest(dataset)
    transform = FactsTransform(
        examples=example_gen.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        preprocessing_fn=family.preprocessing_fn,
        disable_statistics=not config.transform_statistics,
        materialize=not family.reads_raw_examples,
        custom_config=with_facts({**family.transform_config(config, dataset), "code_version": code_version},
                                  data_facts),
    ).with_id(TRANSFORM)
    transform.add_upstream_node(example_validator)  # nothing is transformed or trained on invalid data
    # What the Trainer and the Tuner read: Transform's output, or ExampleGen's through the transform graph.
    training_examples = (example_gen.outputs["examples"] if family.reads_raw_examples
                         else transform.outputs["transformed_examples"])
    settings = _training_settings(config, family, dataset)
    # --warm-start: the latest blessed model of this pipeline as Trainer's base_model (pipeline/warm_start.py).
    warm_start = latest_blessed_model_resolver() if config.warm_start else None
    hyperparameters, tuning_nodes = _hyperparameters(config, family, data_facts, training_examples, transform,
                                                     schema_gen, settings, code_version, launchers.tuner)
    run_fn, trainer_config = launchers.trainer(family.run_fn, with_facts(
        {**settings.to_custom_config(), "code_version": code_version, FAMILY_KEY: family.name}, data_facts))
    trainer = FactsTrainer(
        run_fn=run_fn,
        base_model=warm_start.outputs["model"] if warm_start else None,
        hyperparameters=hyperparameters,
        examples=training_examples,
        transform_graph=transform.outputs["transform_graph"],
        schema=schema_gen.outputs["schema"],
        train_args=trainer_pb2.TrainArgs(num_steps=train_steps),
        eval_args=trainer_pb2.EvalArgs(num_steps=eval_steps),
        # The family is recorded explicitly (an MLMD exec property), so the report and the
        # summary read it instead of guessing it from run_fn.
        custom_config=trainer_config,
    ).with_id(TRAINER)
    evaluator, pusher = _evaluation_and_push(config, family, dataset, example_gen, trainer,
                                             _model_card_settings(config, family, code_version, settings))
    scoring_nodes = _scoring(config, family, dataset, example_gen, trainer, evaluator) if config.score_dir else []
    components = [c for c in (example_gen, statistics_gen, schema_gen, pinned_schema, example_validator,
                              transform, *tuning_nodes, warm_start, trainer, evaluator, pusher, *scoring_nodes)
                  if c is not None]
    extra_beam_args = component_beam_args or {}
    for component in components:
        if component.id in extra_beam_args:
            component.with_beam_pipeline_args(list(extra_beam_args[component.id]))
    return Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=components,
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata_connection_config,
        beam_pipeline_args=list(beam_pipeline_args),
    )


def _ingestion(config: PipelineConfig, family, dataset: DatasetManifest | None):
    """The ExampleGen, the dataset the later steps are configured from, and the Trainer's step budgets."""
    split_patterns = dataset.extra.get("split_patterns") if dataset is not None else None
    if dataset is None:
        # Ingestion inside the pipeline: the ExampleGen reads --data (any tf.io.gfile URI) and
        # records the whole-data facts on its Examples, where the steps below read them
        # (components/data_facts.py); nothing here reads the data. 0 steps: decided from those facts.
        assert family.example_gen is not None  # no dataset only when config.ingests_in_pipeline()
        return (family.example_gen(config).with_id(EXAMPLE_GEN), pending_manifest(config.data),
                config.train_steps or 0, config.eval_steps or 0)
    if split_patterns:
        # The data preparation already split (data/text_split.py): read its splits as they are.
        example_gen = ImportExampleGen(
            input_base=dataset.examples_dir,
            input_config=example_gen_pb2.Input(splits=[
                example_gen_pb2.Input.Split(name=name, pattern=pattern)
                for name, pattern in split_patterns.items()]),
        )
    else:
        example_gen = ImportExampleGen(
            input_base=dataset.examples_dir,
            input_config=example_gen_pb2.Input(splits=[
                example_gen_pb2.Input.Split(name="all", pattern=dataset.file_pattern)]),
            output_config=example_gen_pb2.Output(split_config=example_gen_pb2.SplitConfig(
                splits=[
                    example_gen_pb2.SplitConfig.Split(name="train", hash_buckets=config.train_buckets),
                    example_gen_pb2.SplitConfig.Split(name="eval", hash_buckets=config.eval_buckets),
                ],
                # Split on a stable id, so an example stays in its split when other features change.
                partition_feature_name=family.split_feature,
            )),
        )
    return (example_gen, dataset, config.resolved_train_steps(dataset.num_examples),
            config.resolved_eval_steps(dataset.num_examples))


def _validation(config: PipelineConfig, example_gen):
    """StatisticsGen, SchemaGen, the pinned schema's importer (or None) and the ExampleValidator."""
    # Top values and unique counts from sketches (Misra-Gries, KMV): exact below 1,024 and 16,384 distinct
    # values (classes, slices), approximate only for ids unique per example, where TFDV's exact count shuffles
    # every value (0.79x the StatisticsGen's time at 200k images: benchmarks/bench_statistics.py).
    statistics_gen = StatisticsGen(examples=example_gen.outputs["examples"],
                                   stats_options=tfdv.StatsOptions(use_sketch_based_topk_uniques=True))
    # The schema Transform and Trainer parse data with: inferred, deterministic, so cached.
    schema_gen = SchemaGen(
        statistics=statistics_gen.outputs["statistics"], infer_feature_shape=True)
    example_validator: StrictExampleValidator | SplitCheckingExampleValidator
    if config.schema_file:
        # A pinned schema from an earlier run: new data is validated against it, and
        # anomalies stop the run (schema drift). Only the validator reads it, so an
        # unchanged re-run stays fully cached downstream.
        pinned_schema = ImportSchemaGen(schema_file=config.schema_file).with_id(PINNED_SCHEMA)
        example_validator = StrictExampleValidator(
            statistics=statistics_gen.outputs["statistics"], schema=pinned_schema.outputs["schema"])
    else:
        # First run (or an accepted change): the schema follows this data; nothing to stop on.
        pinned_schema = None
        example_validator = SplitCheckingExampleValidator(
            statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    return statistics_gen, schema_gen, pinned_schema, example_validator.with_id(EXAMPLE_VALIDATOR)


def _training_settings(config: PipelineConfig, family, dataset: DatasetManifest) -> TrainingSettings:
    return TrainingSettings(
        strategy=config.strategy,
        batch_size=config.batch_size,
        learning_rate=config.learning_rate,
        epochs=config.resolved_epochs(),
        seed=config.seed,
        jit_compile=config.xla,
        profile_batches=config.profile or "",
        gate_margin=config.gate_margin,
        explicit_steps=config.train_steps is not None,
        base_model=config.base_model or "",
        data_service=config.data_service,
        warm_start=config.warm_start,
        family=family.trainer_config(config, dataset),
    )


def _evaluation_and_push(config: PipelineConfig, family, dataset: DatasetManifest, example_gen, trainer,
                         model_card: dict[str, Any]):
    # Baseline = the version TF Serving serves now (see components/evaluator.py for why
    # not TFX's latest-blessed-model Resolver).
    evaluator = ServedBaselineEvaluator(
        examples=example_gen.outputs["examples"],
        model=trainer.outputs["model"],
        eval_config=family.eval_config(config, dataset),
        baseline_serving_dir=config.serving_model_dir,
        eval_batch=config.eval_batch,
    ).with_id(EVALUATOR)
    pusher = AtomicPusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        evaluation=evaluator.outputs["evaluation"],
        base_directory=config.serving_model_dir,
        examples=example_gen.outputs["examples"],
        custom_config={"tflite": family.pusher_tflite_config(),
                       "model_card": model_card, "push_inconclusive": config.push_inconclusive},
    ).with_id(PUSHER)
    return evaluator, pusher


def _scoring(config: PipelineConfig, family, dataset: DatasetManifest, example_gen, trainer, evaluator) -> list:
    """``--score DIR``: the folder as Examples, TFX's BulkInferrer on the Evaluator's blessed model (it
    scores nothing when the model is not blessed), and the predictions as CSV and Parquet (components/scoring.py)."""
    from tfx.components import BulkInferrer
    from tfx.proto import bulk_inferrer_pb2

    from components.scoring import SCORE_SPLIT, ScoreWriter, ScoringExampleGen, listing_key

    if family.scoring is None:
        raise ConfigError("--score", f"model family {family.name!r} declares no reader of files to score, so it "
                                     "cannot score a folder; leave --score out.")
    assert config.score_dir  # the graph adds these steps only for --score
    scoring_examples = ScoringExampleGen(
        score_dir=config.score_dir, reader=family.scoring.reader,
        reader_config=with_facts({**family.scoring.config(config, dataset), "listing": listing_key(config.score_dir),
                                  "follow_links": config.follow_links}, facts_from_manifest(dataset)),
        training_examples=example_gen.outputs["examples"],
    ).with_id(SCORING_EXAMPLE_GEN)
    bulk_inferrer = BulkInferrer(
        examples=scoring_examples.outputs["examples"],
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        data_spec=bulk_inferrer_pb2.DataSpec(example_splits=[SCORE_SPLIT]),
        model_spec=bulk_inferrer_pb2.ModelSpec(model_signature_name=[family.scoring.signature]),
    ).with_id(BULK_INFERRER)
    prediction_output, score_output = family.scoring.outputs
    writer = ScoreWriter(
        inference_result=bulk_inferrer.outputs["inference_result"],
        examples=scoring_examples.outputs["examples"],
        model_blessing=evaluator.outputs["blessing"],
        prediction_output=prediction_output, score_output=score_output,
    ).with_id(SCORE_WRITER)
    return [scoring_examples, bulk_inferrer, writer]


def _model_card_settings(config: PipelineConfig, family, code_version: str,
                         settings: TrainingSettings) -> dict[str, Any]:
    """What the model card beside a pushed version says that no artifact records (components/model_card.py)."""
    return {
        "family": family.name, "description": family.description, "model_name": config.serving_model_name,
        "pipeline_name": config.pipeline_name, "gate_metric": family.gate_metric,
        "gate_metric_label": family.gate_metric_label, "min_accuracy": config.min_accuracy,
        "max_regression": config.max_regression, "data_source": config.data or family.default_data,
        "split_rule": (f"hash of {family.split_feature} into {config.train_buckets} train : "
                       f"{config.eval_buckets} eval buckets"),
        "intended_use": family.card.intended_use, "known_limits": list(family.card.known_limits),
        "training": {**settings.to_custom_config()["training"], "train_steps": config.train_steps},
        "code_version": code_version,
    }


def _hyperparameters(config: PipelineConfig, family, data_facts: dict[str, Any], training_examples, transform,
                     schema_gen, settings: TrainingSettings,
                     code_version: str, launch_tuner: FunctionLauncher):
    """The Trainer's ``hyperparameters`` input and the nodes producing it: TFX's Tuner
    (``--tune-trials``), TFX's Importer of a past search (``--hyperparameters``), or none."""
    if config.tune_trials:
        # Imported here: the Tuner loads KerasTuner (and Keras 3), which untuned runs never need.
        from components.tuner import RecordingTuner
        from models.common.search_space import TuningSettings
        from pipeline.tuning import DEFAULT_STEPS

        tuning = TuningSettings(trials=config.tune_trials, algorithm=config.tune_algorithm or "random",
                                budget_seconds=60.0 * (config.tune_budget or 0.0), seed=config.seed)
        tuner_fn, tuner_config = launch_tuner(family.tuning.tuner_fn, with_facts({
            **settings.to_custom_config(), **tuning.to_custom_config(), "code_version": code_version,
            FAMILY_KEY: family.name}, data_facts))
        tuner = RecordingTuner(
            examples=training_examples,
            transform_graph=transform.outputs["transform_graph"],
            schema=schema_gen.outputs["schema"],
            tuner_fn=tuner_fn,
            train_args=trainer_pb2.TrainArgs(num_steps=config.tune_steps or DEFAULT_STEPS),
            eval_args=trainer_pb2.EvalArgs(num_steps=1),
            custom_config=tuner_config,
        ).with_id(TUNER)
        return tuner.outputs["best_hyperparameters"], [tuner]
    if config.hyperparameters_file:
        from tfx.dsl.components.common.importer import Importer
        from tfx.types import standard_artifacts

        from pipeline.tuning import stage_hyperparameters

        importer = Importer(
            source_uri=stage_hyperparameters(config.hyperparameters_file, config.model, config.output_dir),
            artifact_type=standard_artifacts.HyperParameters,
        ).with_id(HYPERPARAMETERS_IMPORTER)
        return importer.outputs["result"], [importer]
    return None, []

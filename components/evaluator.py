"""Evaluator whose baseline is the model currently served.

TFX's usual baseline, ``Resolver(LatestBlessedModelStrategy)``, compiles for Kubeflow V2 to
a ``resolver.outputArtifactQueries`` step that only Vertex AI Pipelines implements, so an
open-source KFP cluster cannot run it. This Evaluator instead reads the newest version in
the TF Serving model directory, which is exactly what a new model has to beat, and hands
it to TFX's own Evaluator logic as ``baseline_model``. Same node on every runner, no
resolver, and a re-run whose model is unchanged stays fully cached (no duplicate push).

The served model is no MLMD artifact of this run, so the blessing names it by path
(``baseline_model_uri``) rather than by TFX's ``baseline_model_id``: the id of an artifact
built in-process is 0, which no orchestrator can resolve (on Kubeflow, TFX's container
entrypoint translates that id to an artifact name and fails with ``KeyError: 0``).
"""
import logging
import tempfile
from typing import Any

from stackenv import compat
from stackenv.tfma import tfma

from tfx import types
from tfx.components.evaluator import constants
from tfx.components.evaluator import executor as evaluator_executor
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import artifact_utils, standard_artifacts, standard_component_specs
from tfx.types.component_spec import ExecutionParameter
from tfx.utils import io_utils, json_utils, path_utils

from artifacts.model_files import READ_ERRORS
from artifacts.serving_dir import latest_version_dir
from components.reference_gate import apply_reference_gate

# Blessing custom property: the served version directory the candidate was compared with.
BASELINE_MODEL_URI_KEY = "baseline_model_uri"

log = logging.getLogger(__name__)

BASELINE_SERVING_DIR_KEY = "baseline_serving_dir"
#: Most records per batch TFMA reads (``--eval-batch``). tfx_bsl batches by size, 20 MiB, so
#: otherwise up to 8,192 records of ~100 bytes for a text window, whose model outputs (probabilities
#: over the vocabulary) are a thousand times larger: that is what the Evaluator's memory grew with
#: (docs/history/benchmarks-log.md, "The Evaluator's memory").
EVAL_BATCH_KEY = "eval_batch"
EVAL_BATCH_RECORDS = 256  # when the graph sets none (a graph compiled before the setting)


def _output_shapes(saved_model_dir: str) -> dict[str, tuple]:
    import tensorflow as tf

    outputs = tf.saved_model.load(saved_model_dir).signatures["serving_default"].structured_outputs
    return {name: tuple(spec.shape.as_list()[1:]) for name, spec in outputs.items()}


def output_mismatch(candidate_dir: str, baseline_dir: str) -> str | None:
    """Why TFMA cannot compare the two models (different class count or vocabulary), or None."""
    candidate, baseline = _output_shapes(candidate_dir), _output_shapes(baseline_dir)
    if candidate == baseline:
        return None
    return f"serving_default outputs {baseline} served vs {candidate} candidate"


BASELINE_SKIPPED_PROPERTY = "baseline_skipped"  # on the evaluation artifact: why no baseline (summary)
_PROBE_EXAMPLES = 4


def served_model_cannot_read(served_dir: str, examples: list[types.Artifact],
                             exec_properties: dict[str, Any]) -> str | None:
    """Why the served model fails on a few of the new eval examples, or None if it reads them.

    A changed --image-size (accepted with --accept-schema-change) keeps the class count, so
    output_mismatch passes, but the served model parses a different image length and TFMA
    would fail deep in Beam. Feeding it a few real examples first is the one check that
    does not depend on how a family encodes its inputs.
    """
    import tensorflow as tf

    splits = json_utils.loads(exec_properties.get(standard_component_specs.EXAMPLE_SPLITS_KEY) or "null")
    artifact = examples[0]
    split = (splits or ["eval"])[0]
    files = tf.io.gfile.glob(f"{artifact_utils.get_split_uri([artifact], split)}/*")
    if not files:
        return None
    records = [r.numpy() for r in tf.data.TFRecordDataset(files[:1], compression_type="GZIP").take(_PROBE_EXAMPLES)]
    try:
        signature = tf.saved_model.load(served_dir).signatures["serving_default"]
        (name,) = signature.structured_input_signature[1]
        signature(**{name: tf.constant(records)})
    except (*READ_ERRORS, TypeError, KeyError) as error:
        return _error_line(error)
    return None


def _error_line(error: BaseException) -> str:
    """The line of a TF error that says what went wrong ("Graph execution error:" says nothing)."""
    lines = [line.strip() for line in str(error).splitlines()]
    useful = [line for line in lines if line and not line.startswith(
        ("Graph execution error", "Detected at node", "File ", "[[", "Stack trace", "Node:"))]
    shaped = [line for line in useful if "size" in line or "shape" in line]
    return ((shaped or useful or [type(error).__name__])[0])[:300]


def _record_skipped_baseline(output_dict: dict[str, list[types.Artifact]], reason: str) -> None:
    evaluation = artifact_utils.get_single_instance(output_dict[standard_component_specs.EVALUATION_KEY])
    evaluation.set_string_custom_property(BASELINE_SKIPPED_PROPERTY, reason)


class ServedBaselineEvaluatorSpec(standard_component_specs.EvaluatorSpec):
    PARAMETERS = {
        **standard_component_specs.EvaluatorSpec.PARAMETERS,
        BASELINE_SERVING_DIR_KEY: ExecutionParameter(type=str, optional=True),
        EVAL_BATCH_KEY: ExecutionParameter(type=int, optional=True),
    }


class Executor(evaluator_executor.Executor):
    """TFX's Evaluator executor with the served model injected as the baseline."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        # How TFMA is fed (docs/history/benchmarks-log.md, "At scale"): batches by size, not Beam's
        # small adaptive ones, passed to the model's signatures by name (compat.tfma_calls_signatures_by_name);
        # tf_keras metric code run as written, not re-traced by AutoGraph for every slice's combiner
        # (as the Trainer does; on Kubeflow this is its own process).
        from models.common.autograph import convert_tf_keras

        convert_tf_keras(False)
        properties = dict(exec_properties)
        with (compat.byte_size_batching(int(properties.pop(EVAL_BATCH_KEY, None) or EVAL_BATCH_RECORDS)),
              compat.tfma_calls_signatures_by_name()):
            self._evaluate(input_dict, output_dict, properties)

    def _evaluate(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
                  exec_properties: dict[str, Any]) -> None:
        _fill_class_count(input_dict, exec_properties)
        _gate_on_references(input_dict, output_dict, exec_properties)
        served = latest_version_dir(exec_properties.pop(BASELINE_SERVING_DIR_KEY, None) or "")
        if served is None:
            log.info("No model served yet: evaluating without a baseline (change thresholds skipped).")
            return super().Do(input_dict, output_dict, exec_properties)
        candidate = path_utils.serving_model_path(
            artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY]).uri)
        try:
            mismatch = output_mismatch(candidate, served) or served_model_cannot_read(
                served, input_dict[standard_component_specs.EXAMPLES_KEY], exec_properties)
        except READ_ERRORS as error:  # a damaged served model (e.g. truncated variables): no baseline
            mismatch = f"it cannot be loaded ({_error_line(error)})"
        if mismatch:
            log.warning("The served model %s is not comparable with the candidate (%s), e.g. after "
                        "--accept-schema-change added classes: evaluating without a baseline.", served, mismatch)
            _record_skipped_baseline(output_dict, f"the served model {served} is not comparable: {mismatch}")
            return super().Do(input_dict, output_dict, exec_properties)
        log.info("Baseline: the served model %s", served)
        # TFX reads a Model artifact's SavedModel from <uri>/Format-Serving.
        with tempfile.TemporaryDirectory(prefix="served-baseline-") as artifact_dir:
            io_utils.copy_dir(served, path_utils.serving_model_dir(artifact_dir))
            baseline = standard_artifacts.Model()
            baseline.uri = artifact_dir
            inputs = {**input_dict, standard_component_specs.BASELINE_MODEL_KEY: [baseline]}
            super().Do(inputs, output_dict, exec_properties)
        _name_baseline_by_path(artifact_utils.get_single_instance(
            output_dict[standard_component_specs.BLESSING_KEY]), served)


def _name_baseline_by_path(blessing: types.Artifact, served: str) -> None:
    """Record the served version by path instead of the in-process artifact's id (always 0) and
    its temporary copy's path (TFX's ``baseline_model``, gone after the step)."""
    properties = blessing.mlmd_artifact.custom_properties
    if constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY in properties:
        del properties[constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY]
    blessing.set_string_custom_property(BASELINE_MODEL_URI_KEY, served)
    if blessing.has_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY):
        blessing.set_string_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, served)


def _fill_class_count(input_dict, exec_properties) -> None:
    """A graph compiled without the data leaves the class count to the ExampleGen's facts."""
    from components.data_facts import facts_of, fill_eval_config

    key = standard_component_specs.EVAL_CONFIG_KEY
    examples = input_dict.get(standard_component_specs.EXAMPLES_KEY) or []
    facts = facts_of(examples[0]) if examples and exec_properties.get(key) else None
    if facts:
        exec_properties[key] = fill_eval_config(exec_properties[key], facts)


def _gate_on_references(input_dict, output_dict, exec_properties) -> None:
    """Raise the key metric's floor to what the candidate's references demand (components/reference_gate.py)."""
    key = standard_component_specs.EVAL_CONFIG_KEY
    if exec_properties.get(key):
        candidate = path_utils.serving_model_path(
            artifact_utils.get_single_instance(input_dict[standard_component_specs.MODEL_KEY]).uri)
        evaluation = artifact_utils.get_single_instance(output_dict[standard_component_specs.EVALUATION_KEY])
        exec_properties[key] = apply_reference_gate(exec_properties[key], candidate, evaluation.uri,
                                                    _eval_example_count(input_dict, exec_properties))


def _eval_example_count(input_dict, exec_properties) -> int | None:
    """How many examples TFMA will evaluate: the evaluated splits' counts in the ExampleGen's facts, or None
    (data ingested by ImportExampleGen, a split without a count)."""
    from components.data_facts import facts_of

    examples = input_dict.get(standard_component_specs.EXAMPLES_KEY) or []
    facts = facts_of(examples[0]) if examples else None
    counts = (facts or {}).get("split_counts") or {}
    splits = json_utils.loads(exec_properties.get(standard_component_specs.EXAMPLE_SPLITS_KEY) or "null") or ["eval"]
    if not counts or any(not counts.get(split) for split in splits):
        return None
    return int(sum(counts[split] for split in splits))


class ServedBaselineEvaluator(base_beam_component.BaseBeamComponent):
    """Evaluator with the served model as baseline; outputs ``evaluation`` and ``blessing``."""

    SPEC_CLASS = ServedBaselineEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(Executor)

    def __init__(self, examples: types.BaseChannel, model: types.BaseChannel, eval_config: tfma.EvalConfig,
                 baseline_serving_dir: str, example_splits: list[str] | None = None,
                 eval_batch: int = EVAL_BATCH_RECORDS):
        super().__init__(spec=ServedBaselineEvaluatorSpec(
            examples=examples,
            model=model,
            eval_config=eval_config,
            example_splits=json_utils.dumps(example_splits),
            baseline_serving_dir=baseline_serving_dir,
            eval_batch=eval_batch,
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing),
        ))

"""The model-family registry: what the pipeline, the CLI and the report know about a family.

Why a registry of declarations: before it, adding a family meant editing the config's
defaults, this table, the report's own family table, the serving listing, the CLI help
text and four copies of the gate metric's name. Now a family is its ``models/<family>/``
package plus ONE ``ModelFamily`` registration (``pipeline/families/<family>.py``, or any
module that calls ``register``); ``pipeline/`` and ``components/`` only ask the registry.

Why the registration lives under ``pipeline/`` and not in ``models/<family>/``: it names
orchestration concepts (the config, data preparation, TFMA's EvalConfig) and model code
must stay orchestration-free. Why this module imports nothing heavy: the CLI builds its
``--help`` from the registrations, and ``--help`` must not load TensorFlow; everything a
family runs is a dotted path or a function that imports its code when called.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import pathlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from stackenv.errors import ConfigError

from pipeline.settings import DATA_COMMANDS, setting

if TYPE_CHECKING:  # type names only: importing them loads TensorFlow
    from stackenv.tfma import tfma

    from tensorflow_metadata.proto.v0 import schema_pb2

    from data.tfrecords import DatasetManifest

class RunConfig(Protocol):
    """What a family's functions read of a run's settings (``pipeline.config.PipelineConfig`` has it all).

    Declared here so the registry needs nothing of the config module, which imports the registry.
    """

    data: str | None
    family_settings: Any
    follow_links: bool
    base_model: str | None
    span_pattern: str | None
    spans: tuple[int, int] | None
    min_accuracy: float
    max_regression: float
    train_buckets: int
    eval_buckets: int

    @property
    def data_cache_dir(self) -> str: ...


# Key in the Trainer's custom_config (an MLMD exec property) naming the family that trained
# the model, so readers of a run never have to guess it from run_fn.
FAMILY_KEY = "model_family"


class UnknownFamilyError(ConfigError):
    """``--model`` names no registered family; the message lists the known ones."""


T = TypeVar("T")


def option(flag: str, default: T, help: str, **spec: Any) -> T:
    """A family setting: a field of its settings dataclass that is also a flag of every command that prepares
    data or builds the pipeline (pipeline/settings.py: ``spec`` takes its range, choices, metavar)."""
    return setting(default, flag=flag, help=help, commands=DATA_COMMANDS, **spec)


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """Settings type of a family without family-specific settings."""


@dataclasses.dataclass(frozen=True)
class TrainingDefaults:
    """The family's defaults of the shared settings ``PipelineConfig`` leaves as None.

    Why per family: the right training length, learning rate and gate floor depend on the
    model and its data (measured: benchmarks/README.md).
    """

    epochs: int
    batch_size: int
    learning_rate: float
    min_accuracy: float                  # floor of the gate metric on the overall slice
    min_accuracy_note: str = ""          # why that floor, shown in --min-accuracy's help
    #: What a run does with ``epochs`` when neither --epochs nor --train-steps is typed (the family's
    #: trainer may stop early or bound the steps by the data), shown in --epochs' help;
    #: tests/test_step_budget_doc.py checks the CLI reference's statement against the trainer.
    epochs_note: str = ""


@dataclasses.dataclass(frozen=True)
class BatchMemory:
    """What one example of a training batch needs (pipeline/local/memory.py compares the batch with the machine)."""

    bytes_per_example: float
    shape: str            # "32x32x3 images"
    smaller: str          # the flag that shrinks an example: "--image-size"


@dataclasses.dataclass(frozen=True)
class Tuning:
    """Hyperparameter search (``--tune-trials``): dotted paths to the family's TFX ``tuner_fn`` and to its search
    space, a tuple of ``models.common.search_space.Knob`` in a module that loads no TensorFlow (the CLI checks
    ``--hyperparameters`` files against it)."""

    tuner_fn: str
    search_space: str


@dataclasses.dataclass(frozen=True)
class NoTflite:
    """A family without TFLite models beside its pushed versions, and why (the run summary prints it)."""

    why: str = "the model family declares no TFLite conversion"


@dataclasses.dataclass(frozen=True)
class Scoring:
    """Batch scoring (``run --score DIR``, components/scoring.py): the dotted path of the family's reader of one
    file, ``(uri, relative, settings) -> serialized tf.Example`` (data/scoring.py); the serving outputs holding the
    prediction (its first value) and the scores; the signature TFX's BulkInferrer calls (serialized Examples in,
    every string output at least [batch, 1]); and the reader's settings, from (config, dataset)."""

    reader: str
    outputs: tuple[str, str]
    signature: str = "serving_default"
    config: Callable[[RunConfig, DatasetManifest], dict[str, Any]] = lambda config, dataset: {}


@dataclasses.dataclass(frozen=True)
class ModelCard:
    """The model card's prose (components/model_card.py, beside each pushed version)."""

    intended_use: str = ""
    known_limits: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class ReportParts:
    """The report's family-specific parts: dotted paths to ``(evaluation) -> {title: matplotlib Figure}`` and,
    optionally, to ``(evaluation) -> DataFrame`` of sample outputs shown under ``samples_title``."""

    pictures: str
    samples: str | None = None
    samples_title: str = "Samples"


@dataclasses.dataclass(frozen=True)
class Memory:
    """What a local run's memory pre-check (pipeline/local/memory.py) asks of the family: ``(config) ->`` the
    Trainer's memory per example of a batch, and ``(config) ->`` bytes of one eval example's model outputs (the
    Evaluator holds ``--eval-batch`` of them per model; None: too small to matter, e.g. a class vector)."""

    batch: Callable[[RunConfig], BatchMemory]
    eval_output_bytes: Callable[[RunConfig], float] | None = None


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """What differs between families, for the pipeline, CLI, summary, serving listing and report.

    The optional parts are grouped (``tuning``, ``scoring``, ``card``, ``memory``, ``tflite``), so a new family
    states what it has and leaves out the rest.
    """

    name: str                                   # --model value; also the serving model name by default
    description: str                            # --model help: "image classifier"
    data_help: str                              # --data help: accepted sources and the default data
    defaults: TrainingDefaults
    gate_metric: str                            # TFMA metric the blessing gate, summary and listing use
    gate_metric_label: str                      # how people call it: "Top-5 next-word accuracy"
    preprocessing_fn: str                       # dotted path, run by Transform
    run_fn: str                                 # dotted path, run by Trainer
    prepare_data: Callable[[RunConfig], DatasetManifest]
    eval_config: Callable[[RunConfig, DatasetManifest], tfma.EvalConfig]
    split_feature: str                          # ExampleGen hashes it into train/eval
    curate_schema: Callable[[schema_pb2.Schema], None]  # before pinning (pipeline/local/schema_pin.py)
    slicing_features: tuple[str, ...]           # what the Evaluator slices by; the report's tables
    report: ReportParts
    settings_type: type = NoSettings            # frozen dataclass of family settings, fields via ``option``
    default_data: str = "the family's default data set"   # what --data means when left out (the model card)
    # (config) -> the ExampleGen reading config.data inside the pipeline (components/); None:
    # the family has no in-pipeline reader and always uses prepare_data.
    example_gen: Callable[[RunConfig], Any] | None = None
    # The family's own custom_config of Transform and TrainingSettings.family; the data's facts reach
    # both without them (components/data_facts.py).
    transform_config: Callable[[RunConfig, DatasetManifest], dict[str, Any]] = lambda config, dataset: {}
    trainer_config: Callable[[RunConfig, DatasetManifest], dict[str, Any]] = lambda config, dataset: {}
    class_vocabulary: str | None = None         # TFT vocabulary of class names in id order (classifiers)
    # True: the family's Trainer and Tuner read ExampleGen's examples through the transform graph
    # (models/common/raw_examples.py), so Transform only analyses (TFX's ``materialize=False``).
    reads_raw_examples: bool = False
    # (label, TFMA metric) printed on one line under the headline metric, overall (pipeline/results/summary.py):
    # e.g. the text family's top-1 and its figures on known next words.
    summary_metrics: tuple[tuple[str, str], ...] = ()
    tuning: Tuning | None = None                # None: --tune-trials is refused
    # TFLite models beside each pushed version (components/tflite_export.py, in the Pusher): the dotted path
    # of the family's models.common.tflite.TfliteSpec, or why there are none.
    tflite: str | NoTflite = NoTflite()
    scoring: Scoring | None = None              # None: --score is refused
    card: ModelCard = ModelCard()
    memory: Memory | None = None                # None: no estimate before a local run

    def pusher_tflite_config(self) -> dict[str, str]:
        """The Pusher's ``custom_config["tflite"]``: what converts, or why nothing does."""
        return {"note": self.tflite.why} if isinstance(self.tflite, NoTflite) else {"spec": self.tflite}

    def settings(self, values: Any = None) -> Any:
        """The family's typed settings from None (defaults), a dict, or an instance.

        Raises ValueError naming the settings this family has when a key is unknown.
        """
        if values is None:
            return self.settings_type()
        if isinstance(values, self.settings_type):
            return values
        if isinstance(values, Mapping):
            known = {f.name for f in dataclasses.fields(self.settings_type)}
            unknown = sorted(set(values) - known)
            if unknown:
                raise ConfigError("--model", f"model family {self.name!r} has no settings {unknown}; its settings are "
                                 f"{sorted(known) or 'none'}.")
            return self.settings_type(**values)
        raise ConfigError("--model", f"settings of model family {self.name!r} must be a {self.settings_type.__name__} "
                         f"or a dict, got {type(values).__name__}.")

    def knobs(self) -> tuple[Any, ...]:
        """The family's search space (``tuning.search_space`` loaded); () when it has none."""
        return tuple(load_attribute(self.tuning.search_space)) if self.tuning else ()

    def report_pictures_function(self) -> Callable[[Any], dict[str, Any]]:
        """The function behind ``report.pictures`` (imports the report's plotting code)."""
        return load_function(self.report.pictures)

    def code_version(self) -> str:
        """Hash of the code Transform and Trainer run for this family.

        They reference code by dotted path, so TFX cannot see a code change; putting this
        hash in their custom_config makes such a change invalidate the cache.
        """
        digest = hashlib.sha256()
        for package in ("models.common", _package_of(self.run_fn)):
            for path in _source_files(package):
                digest.update(path.name.encode())
                digest.update(path.read_bytes())
        return digest.hexdigest()[:16]


def load_function(dotted: str) -> Callable[..., Any]:
    """``package.module.function`` -> the function, imported on demand."""
    return load_attribute(dotted)


def load_attribute(dotted: str) -> Any:
    """``package.module.NAME`` -> that module attribute (a function, a constant), imported on demand."""
    module_name, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module_name), name)


def _package_of(dotted_function: str) -> str:
    """``models.cnn.trainer.run_fn`` -> ``models.cnn``; a top-level module -> that module."""
    module = dotted_function.rsplit(".", 1)[0]
    return module.rsplit(".", 1)[0] if "." in module else module


def _source_files(dotted: str) -> list[pathlib.Path]:
    spec = importlib.util.find_spec(dotted)
    if spec is None or spec.origin is None:
        raise ValueError(f"Cannot find the code of {dotted!r} to hash for the pipeline cache.")
    if spec.submodule_search_locations:
        return sorted(pathlib.Path(list(spec.submodule_search_locations)[0]).rglob("*.py"))
    return [pathlib.Path(spec.origin)]


# name -> family, in registration order (the CLI lists them in this order).
FAMILIES: dict[str, ModelFamily] = {}


def register(family: ModelFamily) -> ModelFamily:
    """Add a family; a second family under a taken name is a mistake, so it raises."""
    if family.name in FAMILIES and FAMILIES[family.name] is not family:
        raise ValueError(f"A model family named {family.name!r} is already registered.")
    if not dataclasses.is_dataclass(family.settings_type):
        raise TypeError(f"settings_type of {family.name!r} must be a dataclass, got {family.settings_type!r}")
    FAMILIES[family.name] = family
    return family


@contextlib.contextmanager
def registered(family: ModelFamily) -> Iterator[ModelFamily]:
    """Register ``family`` for the duration of a block (tests, notebooks trying a family)."""
    register(family)
    try:
        yield family
    finally:
        FAMILIES.pop(family.name, None)


def family_names() -> tuple[str, ...]:
    return tuple(FAMILIES)


def get_family(name: str) -> ModelFamily:
    """The registered family ``name``; an unknown name raises a message listing the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(FAMILIES) or "none"
        raise UnknownFamilyError("--model",
            f"must be one of the registered model families ({known}), got {name!r}. A new family "
            "is registered with pipeline.families.register (see pipeline/families/registry.py).") from None


def gate_metrics() -> tuple[str, ...]:
    """Every registered family's gate metric, once each, in registration order."""
    return tuple(dict.fromkeys(family.gate_metric for family in FAMILIES.values()))


def family_of_trainer_properties(properties: Any) -> str | None:
    """The family that trained a model, from its Trainer execution's properties.

    ``properties``: an MLMD Execution (its custom properties) or a mapping of property
    names to values, as TFX records them (``custom_config`` is a JSON string). The family is
    recorded under ``FAMILY_KEY`` in the custom_config; Trainer runs from before that key
    existed are matched by their exact ``run_fn`` against the registered families. None when
    neither tells.
    """
    if hasattr(properties, "custom_properties"):
        properties = {name: getattr(value, value.WhichOneof("value")) if value.WhichOneof("value") else None
                      for name, value in properties.custom_properties.items()}
    custom_config = properties.get("custom_config")
    if isinstance(custom_config, str):
        try:
            custom_config = json.loads(custom_config)
        except ValueError:
            custom_config = None
    if isinstance(custom_config, Mapping) and custom_config.get(FAMILY_KEY):
        return str(custom_config[FAMILY_KEY])
    run_fn = properties.get("run_fn")
    return next((family.name for family in FAMILIES.values() if run_fn and family.run_fn == run_fn), None)

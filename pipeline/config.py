"""The one typed configuration of a pipeline run; the CLI fills it, defaults run as is."""
import dataclasses
import math
import os
import re
from typing import Any

from stackenv.errors import ConfigError

from pipeline.families import DEFAULT_MODEL, get_family

BEAM_MODES = ("auto", "in_memory", "multi_processing")
# Below this many examples, multi_processing's worker start-up per Beam component costs
# more than the parallelism gains (benchmarks/README.md, bench_beam).
AUTO_MULTIPROCESSING_MIN_EXAMPLES = 50_000
# On 2 cores multi_processing was slower than in_memory even at 100k examples (same
# reference), so auto only picks it on machines with more cores than that.
AUTO_MULTIPROCESSING_MIN_CPUS = 3


def _flag(field: str) -> str:
    """The command-line option that sets a config field (they share names)."""
    return "--" + field.replace("_", "-")


def _is_batch_range(text: str) -> bool:
    parts = text.split(",")
    return len(parts) == 2 and all(p.strip().isdigit() for p in parts) and int(parts[0]) <= int(parts[1])


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(flag: str, name: str) -> str:
    """A name that becomes one directory level under --output: no separators, no ``..``.

    ``--serving-name ../../x`` would otherwise push a model outside the output directory.
    """
    if not _NAME.fullmatch(name) or ".." in name:
        raise ConfigError(flag, f"{name!r} is not a valid name: it becomes a folder under --output, so use "
                                "letters, digits, '.', '_' and '-' only (no '/', no '..'; at most 100 "
                                "characters), e.g. my-model.")
    return name


def _is_uri(path: str) -> bool:
    return "://" in path


@dataclasses.dataclass
class PipelineConfig:
    """Everything that shapes a run. Paths may be local or object-store URIs (gs://, s3://)."""

    model: str = DEFAULT_MODEL            # a registered model family (pipeline/families/)
    data: str | None = None          # None: the bundled default data set
    output_dir: str = "output"
    pipeline_name: str | None = None  # default: "<model>-pipeline"
    serving_model_name: str | None = None  # default: the model family name

    # The family's own settings (image size, text windows, ...): an instance of its
    # ``settings_type`` or a dict of its fields; None: the family's defaults.
    family_settings: Any = None
    train_buckets: int = 4               # hash split train:eval = 4:1 (on example_id / document)
    eval_buckets: int = 1
    # Ingestion: "example-gen" reads --data inside the pipeline (components/*_example_gen.py);
    # "prepare" converts it before the run and the pipeline imports the TFRecords (data/prepare.py).
    ingest: str = "example-gen"
    span_pattern: str | None = None       # e.g. "span-{SPAN}": span folders inside --data
    spans: tuple[int, int] | None = None  # inclusive span range; None: the newest span

    # Training (None: the model family's default, ModelFamily.defaults)
    epochs: int | None = None
    train_steps: int | None = None    # overrides epochs when set
    eval_steps: int | None = None     # default: one pass over the eval split
    batch_size: int | None = None     # per replica
    learning_rate: float | None = None
    strategy: str = "mirrored"
    seed: int = 42
    xla: bool = False                    # jit_compile the train step
    profile: str | None = None        # "START,END" batches to trace with the TF profiler
    data_service: str = ""               # Trainer input via tf.data service: "auto" or HOST:PORT
    # compile only: N > 1 runs the Trainer step as a Training Operator TFJob of N workers
    # (pipeline/kubeflow/training/trainer_launcher.py); the step waits at most trainer_job_timeout seconds for it.
    trainer_workers: int = 1
    trainer_job_timeout: int = 24 * 3600

    # Evaluation gate, on the family's key metric (ModelFamily.gate_metric)
    min_accuracy: float | None = None  # value threshold on the overall slice
    max_regression: float = 0.01         # tolerated absolute drop vs. the served model
    gate_margin: float = 0.01            # must beat the gate reference predictor by this (references.json)
    base_model: str | None = None     # cnn: TF Hub handle/URL or SavedModel dir of a feature extractor
    warm_start: bool = False          # Trainer starts from the latest blessed model (pipeline/warm_start.py)

    # Transform's pre-/post-transform statistics cost time on every run, and nothing here reads them
    # (StatisticsGen already describes the input). On for inspecting features in TFDV.
    transform_statistics: bool = False

    # Data validation: a pinned schema file makes ExampleValidator stop runs on anomalies.
    schema_file: str | None = None    # None: SchemaGen infers the schema from the data

    # Hyperparameter search (pipeline/tuning.py): None = off. Steps/budget/algorithm only
    # with trials; --hyperparameters FILE reuses a past search instead.
    tune_trials: int | None = None
    tune_steps: int | None = None        # per trial (default pipeline.tuning.DEFAULT_STEPS)
    tune_budget: float | None = None     # minutes of search wall time
    tune_algorithm: str | None = None    # random (default), bayesian, hyperband
    hyperparameters_file: str | None = None
    # compile only: N > 1 runs the Tuner step's trials in a TFJob of a KerasTuner oracle and N trial
    # workers (pipeline/kubeflow/training/tuner_launcher.py); the step waits at most tune_job_timeout seconds for it.
    tune_workers: int = 1
    tune_job_timeout: int = 24 * 3600

    # Orchestration
    beam_mode: str = "auto"
    beam_workers: int = dataclasses.field(default_factory=lambda: os.cpu_count() or 1)
    beam_args: list[str] = dataclasses.field(default_factory=list)
    enable_cache: bool = True

    def __post_init__(self) -> None:
        family = get_family(self.model)  # an unknown name raises, listing the registered ones
        self.family_settings = family.settings(self.family_settings)
        for name in ("epochs", "batch_size", "learning_rate", "min_accuracy"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(family.defaults, name))
        if self.beam_mode not in BEAM_MODES:
            raise ConfigError("--beam-mode", f"must be one of {BEAM_MODES}, got {self.beam_mode!r}")
        for name in ("epochs", "batch_size", "beam_workers", "train_buckets", "eval_buckets", "trainer_workers",
                     "trainer_job_timeout", "tune_workers", "tune_job_timeout"):
            if getattr(self, name) < 1:
                raise ConfigError(_flag(name), f"must be >= 1, got {getattr(self, name)}")
        for name in ("train_steps", "eval_steps"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ConfigError(_flag(name), f"must be >= 1 (or left out), got {getattr(self, name)}")
        if self.trainer_workers > 1:
            if self.strategy not in ("mirrored", "multi_worker"):
                raise ConfigError("--trainer-workers", f"trains under --strategy multi_worker (one replica per worker "
                                  f"pod); drop --strategy {self.strategy}.")
            self.strategy = "multi_worker"
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ConfigError("--learning-rate", f"must be a finite number > 0 (e.g. 0.001), got {self.learning_rate}")
        if not (math.isfinite(self.max_regression)):
            raise ConfigError("--max-regression", f"must be a finite number >= 0, got {self.max_regression}")
        for flag, name in (("--pipeline-name", self.pipeline_name), ("--serving-name", self.serving_model_name)):
            if name is not None:
                check_name(flag, name)
        if self.profile and not _is_batch_range(self.profile):
            raise ConfigError("--profile", f"takes two batch numbers START,END (e.g. 10,20), got {self.profile!r}")
        if not 0.0 <= self.min_accuracy <= 1.0:  # also refuses nan
            raise ConfigError("--min-accuracy", f"must be in [0, 1], got {self.min_accuracy}")
        if self.max_regression < 0:
            raise ConfigError("--max-regression", f"must be >= 0, got {self.max_regression}")
        if not -1.0 <= self.gate_margin <= 1.0:
            raise ConfigError("--gate-margin", f"must be in [-1, 1], got {self.gate_margin}")
        from pipeline.tuning import check_options, read_hyperparameters

        check_options(self)
        if self.hyperparameters_file:
            read_hyperparameters(self.hyperparameters_file, self.model)  # a bad file stops here, before any work
        if not _is_uri(self.output_dir):
            self.output_dir = os.path.abspath(self.output_dir)
        self.pipeline_name = self.pipeline_name or f"{self.model}-pipeline"
        self.serving_model_name = self.serving_model_name or self.model

    # Where things live, all under output_dir.
    @property
    def pipeline_root(self) -> str:
        return os.path.join(self.output_dir, "tfx", self.pipeline_name)

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_dir, "metadata.sqlite")

    @property
    def serving_dir(self) -> str:
        return os.path.join(self.output_dir, "serving")

    @property
    def serving_model_dir(self) -> str:
        """TF Serving model base path: versions are pushed as <this>/<version>/."""
        return os.path.join(self.serving_dir, self.serving_model_name)

    @property
    def data_cache_dir(self) -> str:
        return os.path.join(self.output_dir, "data")

    @property
    def logs_dir(self) -> str:
        return os.path.join(self.output_dir, "logs")

    def train_fraction(self) -> float:
        return self.train_buckets / (self.train_buckets + self.eval_buckets)

    def ingests_in_pipeline(self) -> bool:
        """The pipeline's ExampleGen reads --data (no prepare step): the default, for families that have one."""
        return self.ingest != "prepare" and get_family(self.model).example_gen is not None

    def resolved_train_steps(self, num_examples: int) -> int:
        """--train-steps, or epochs x (estimated train examples / batch size)."""
        if self.train_steps:
            return self.train_steps
        per_epoch = math.ceil(num_examples * self.train_fraction() / self.batch_size)
        return max(1, self.epochs * per_epoch)

    def resolved_eval_steps(self, num_examples: int) -> int:
        if self.eval_steps:
            return self.eval_steps
        return max(1, math.ceil(num_examples * (1 - self.train_fraction()) / self.batch_size))

    def resolved_epochs(self) -> int:
        """Keras epochs to spread the steps over (validation runs once per epoch)."""
        if self.train_steps:
            return max(1, min(self.epochs, self.train_steps))
        return self.epochs

    def direct_running_mode(self, num_examples: int) -> str:
        if self.beam_mode != "auto":
            return self.beam_mode
        big = num_examples >= AUTO_MULTIPROCESSING_MIN_EXAMPLES
        parallel = self.beam_workers > 1 and (os.cpu_count() or 1) >= AUTO_MULTIPROCESSING_MIN_CPUS
        return "multi_processing" if big and parallel else "in_memory"

    def beam_pipeline_args(self, num_examples: int) -> list[str]:
        """DirectRunner settings, then the user's args (which win: --runner=FlinkRunner ...)."""
        mode = self.direct_running_mode(num_examples)
        args = [f"--direct_running_mode={mode}"]
        if mode == "multi_processing":
            args.append(f"--direct_num_workers={self.beam_workers}")
        return args + list(self.beam_args)

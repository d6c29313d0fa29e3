"""The one typed configuration of a pipeline run; the CLI fills it, defaults run as is."""
import argparse
import dataclasses
import math
import os
import re
from collections.abc import Callable
from typing import Any

from stackenv import text_out
from stackenv.errors import ConfigError

from models.common.search_space import ALGORITHMS
from pipeline.families import DEFAULT_MODEL, FAMILIES, ModelFamily, family_names, get_family
from pipeline.settings import DATA_COMMANDS, check_values, resolved_setting, setting
from pipeline.tuning import DEFAULT_STEPS as DEFAULT_TUNE_STEPS
from pipeline.tuning import MAX_BUDGET_MINUTES, MAX_STEPS, MAX_TRIALS, check_options, read_hyperparameters

BEAM_MODES = ("auto", "in_memory", "multi_processing")
# Below this many examples, multi_processing's worker start-up per Beam component costs
# more than the parallelism gains (benchmarks/README.md, bench_beam).
AUTO_MULTIPROCESSING_MIN_EXAMPLES = 50_000
# On 2 cores multi_processing was slower than in_memory at 100k examples, and at 1M it was
# faster but needed far more memory than a 2-core laptop tends to have (docs/history/benchmarks-log.md,
# "The whole pipeline at 1,000,000 images"), so auto only picks it on machines with more cores.
AUTO_MULTIPROCESSING_MIN_CPUS = 3
# The components that Beam's in_memory runner runs on --beam-workers threads (``--direct_num_workers``,
# one file of a split a thread): TFDV's statistics, whose C++ runs without Python's lock. The
# ExampleGen's Python decoding got slower on two threads, Transform and TFMA no faster
# (docs/history/benchmarks-log.md, "Two files a split").
THREADED_IN_MEMORY = ("StatisticsGen",)
# Far above any batch that trains well here; what one batch needs in memory is checked on top of it.
MAX_BATCH_SIZE = 1 << 16


def _is_batch_range(text: str) -> bool:
    parts = text.split(",")
    return len(parts) == 2 and all(p.strip().isdigit() for p in parts) and int(parts[0]) <= int(parts[1])


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def check_name(flag: str, name: str) -> str:
    """A name that becomes one directory level under --output: no separators, no ``..``.

    ``--serving-name ../../x`` would otherwise push a model outside the output directory.
    """
    if not _NAME.fullmatch(name) or ".." in name:
        raise ConfigError(flag, f"'{text_out.printable(name)}' is not a valid name: it becomes a folder under "
                                "--output, so use letters, digits, '.', '_' and '-' only (no '/', no '..'; at most 100 "
                                "characters), e.g. my-model.")
    return name


def _is_uri(path: str) -> bool:
    return "://" in path


def _inside(path: str, folder: str) -> bool:
    """``path`` is ``folder`` or below it (both resolved: symlinks, ``..``, ``~``)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def check_inputs_beside_output(output_dir: str, data: str | None, score_dir: str | None) -> None:
    """ConfigError when two of the folder flags --output, --data and --score contain one another (local paths,
    links followed), before anything is written: a run reads its own logs, vocabulary, schema and model cards
    as data on the next run (and changes the evaluation split), scores ML Metadata's database while it is
    written, or trains on the images it is asked to score. The prepared-data cache (``<output>/data/``:
    content-addressed, never changed) may be read as --data."""
    _check_data_apart_from_score(data, score_dir)
    if _is_uri(output_dir):
        return
    output = os.path.realpath(os.path.expanduser(output_dir))
    for flag, path in (("--data", data), ("--score", score_dir)):
        if not path or _is_uri(path):
            continue
        real = os.path.realpath(os.path.expanduser(path))
        if _inside(output, real):
            where = "is" if output == real else "is inside"
            raise ConfigError("--output", f"{output_dir} {where} the {flag} folder {path}: every run would "
                              f"{'read' if flag == '--data' else 'score'} what the previous one wrote there (logs, "
                              "vocabulary, schema, model cards, ML Metadata's database) as input. Nothing was "
                              f"written. Choose an --output outside {path} (e.g. --output "
                              f"{os.path.join(os.path.dirname(real.rstrip(os.sep)) or os.sep, 'pipeline-output')}), "
                              f"or move the data out of it.")
        cache = os.path.join(output, "data")
        if _inside(real, output) and not (flag == "--data" and _inside(real, cache) and real != cache):
            raise ConfigError(flag, f"{path} is inside --output {output_dir}, which the run writes (models, "
                              "ML Metadata's database, logs) while it reads this folder. Nothing was written. "
                              f"Move the files to a folder outside {output_dir}, or choose another --output.")


def _check_data_apart_from_score(data: str | None, score_dir: str | None) -> None:
    if not data or not score_dir or _is_uri(data) or _is_uri(score_dir):
        return
    real_data, real_score = (os.path.realpath(os.path.expanduser(p)) for p in (data, score_dir))
    for flag, path, real, other_flag, other, other_real in (("--score", score_dir, real_score, "--data", data,
                                                             real_data),
                                                            ("--data", data, real_data, "--score", score_dir,
                                                             real_score)):
        if _inside(real, other_real):
            where = "is" if real == other_real else "is inside"
            raise ConfigError(flag, f"{path} {where} the {other_flag} folder {other}: the run would train and "
                              "evaluate on the files it is asked to score (and the scores would flatter the model). "
                              "Nothing was written. Keep the folder to score apart from the training data: move it "
                              f"out of {data if flag == '--score' else score_dir}.")


TUNING = "hyperparameter search (KerasTuner through TFX's Tuner)"
TRAINER_JOB = "multi-worker Trainer (Kubeflow Training Operator TFJob)"
TUNER_JOB = "parallel Tuner trials (Kubeflow Training Operator TFJob)"
DAY = 24 * 3600


def per_family(value: Callable[[ModelFamily], object]) -> str:
    """``cnn 15, seq2seq 6``; a single value when every family has the same one."""
    values = {family.name: str(value(family)) for family in FAMILIES.values()}
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return ", ".join(f"{name} {text}" for name, text in values.items())


def _epochs_default() -> str:
    """``cnn 15 (a bound: ...), seq2seq 6 (...)``: the passes and what a run without --epochs does with them."""
    return per_family(lambda f: f"{f.defaults.epochs}" + (f" ({f.defaults.epochs_note})" if f.defaults.epochs_note
                                                          else ""))


def _model_help() -> str:
    described = [f"{f.name} ({f.description})" for f in FAMILIES.values()]
    listed = described[0] if len(described) == 1 else f"{', '.join(described[:-1])} or {described[-1]}"
    return f"model family: {listed}"


def _data_help() -> str:
    return ". ".join(f"{f.name}: {f.data_help}" for f in FAMILIES.values())


def _gate_help() -> str:
    key_metrics = ", ".join(f"{f.name}: {f.gate_metric_label.lower()}" for f in FAMILIES.values())
    return f"bless only if the overall key metric ({key_metrics}) >= this, on top of --gate-margin"


def _gate_floors() -> str:
    return per_family(lambda f: f"{f.defaults.min_accuracy}"
                      + (f", {f.defaults.min_accuracy_note}" if f.defaults.min_accuracy_note else ""))


def _span_range(text: str) -> tuple[int, int]:
    """``N`` or ``N-N``: TFX's ExampleGen reads one span per run (input_processor.py: a StaticRange must start
    and end at the same span), so a wider range is refused here, not as "matches nothing usable" midway."""
    first, _, last = text.partition("-")
    if not (first.strip().isdigit() and (last or first).strip().isdigit()):
        raise argparse.ArgumentTypeError(f"{text!r} is not a span: pass its number, e.g. --spans 3 (or 3-3)")
    if int(first) != int(last or first):
        raise argparse.ArgumentTypeError(
            f"{text} names {abs(int(last) - int(first)) + 1} spans, and TFX's ExampleGen reads one span per run. "
            f"Pass one: --spans {last} (or {last}-{last}); to train on several together, put their files in one "
            "span folder")
    return int(first), int(last or first)


@dataclasses.dataclass
class PipelineConfig:
    """Everything that shapes a run. Paths may be local or object-store URIs (gs://, s3://).

    Each field made by ``setting`` is also a command-line flag, a checked range and a row of the docs'
    settings table (pipeline/settings.py): declare a new setting here, once. A field typed without ``None``
    but declared with a None default is filled in ``__post_init__`` (from the family, or from --model), so
    every reader of a config sees a value.
    """

    model: str = setting(DEFAULT_MODEL, flag="--model", help=_model_help, choices=family_names,
                         commands=DATA_COMMANDS)  # a registered model family (pipeline/families/)
    data: str | None = setting(None, flag="--data", help=_data_help, commands=DATA_COMMANDS, runtime=True,
                               command_help={
        "compile": "a PREPARED dataset directory (holding manifest.json), local or an object-store URI readable by "
                   "the cluster; see `prepare` (default: the bundled data baked into the image)"})
    output_dir: str = "output"  # --output (run, prepare, tfjob) or --pipeline-root (compile): see pipeline/arguments.py
    pipeline_name: str = resolved_setting(flag="--pipeline-name", help="pipeline name in ML Metadata and Kubeflow",
                                        default_text=lambda: "<model>-pipeline")
    serving_model_name: str = resolved_setting(flag="--serving-name", help="model name in the serving dir",
                                             default_text=lambda: "--model")

    # The family's own settings (image size, text windows, ...): an instance of its
    # ``settings_type`` or a dict of its fields; None: the family's defaults.
    family_settings: Any = None
    train_buckets: int = 4               # hash split train:eval = 4:1 (on example_id / document)
    eval_buckets: int = 1
    # Ingestion: "example-gen" reads --data inside the pipeline (components/*_example_gen.py);
    # "prepare" converts it before the run and the pipeline imports the TFRecords (data/prepare.py).
    ingest: str = setting("example-gen", flag="--ingest", choices=("example-gen", "prepare"), help=(
        "example-gen: the pipeline's ExampleGen reads --data (local, gs://, s3://; compile reads nothing); "
        "prepare: convert it locally first, then import the TFRecords"))
    span_pattern: str | None = setting(None, flag="--span-pattern", metavar="PATTERN", help=(
        "span folders inside --data, e.g. 'span-{SPAN}': the newest span is read unless --spans says otherwise "
        "(example-gen ingestion)"))
    spans: tuple[int, int] | None = setting(None, flag="--spans", parse=_span_range, metavar="N",
                                            help="read span N (also written N-N) of --span-pattern, not the newest "
                                            "(TFX's ExampleGen reads one span per run)")

    # Training (None given: the model family's default, ModelFamily.defaults)
    epochs: int = resolved_setting(flag="--epochs", low=1, high=100_000, exclusive="steps", runtime=True,
                                 help="training length in passes over the training split, as each model family "
                                 "reads them (see the default)", default_text=_epochs_default)
    train_steps: int | None = setting(None, flag="--train-steps", low=1, high=10**9, exclusive="steps",
                                      help="the step budget, as given and not scaled to the data (overrides "
                                      "--epochs); a model may still stop early on held-out train")
    eval_steps: int | None = setting(None, flag="--eval-steps", low=1, high=10**9, help=(
        "validation steps during training"), default_text=lambda: "one pass over the eval split")
    batch_size: int = resolved_setting(flag="--batch-size", low=1, high=MAX_BATCH_SIZE,
                                     help="batch size per replica",
                                     default_text=lambda: per_family(lambda f: f.defaults.batch_size))
    learning_rate: float = resolved_setting(flag="--learning-rate", low=1e-9, high=10.0, runtime=True,
                                   help="Adam learning rate",
                                          default_text=lambda: per_family(lambda f: f.defaults.learning_rate))
    strategy: str = setting("mirrored", flag="--strategy", choices=("mirrored", "multi_worker", "default"),
                            help="tf.distribute strategy (multi_worker reads TF_CONFIG)")
    seed: int = setting(42, flag="--seed", low=0, high=2**31 - 1, help="seed of the split-independent randomness "
                        "(initial weights, shuffling, sampling)")
    xla: bool = setting(False, flag="--xla", help="compile the train step with XLA (jit_compile)")
    profile: str | None = setting(None, flag="--profile", metavar="START,END", help=(
        "write a TensorBoard profiler trace of training batches START..END into the Trainer's model_run dir "
        "(view: tensorboard --logdir <it>, Profile tab)"))
    data_service: str = setting("", flag="--data-service", metavar="auto|HOST:PORT", help=(
        "read the Trainer's input through tf.data service: a dispatcher's address, or auto for a local dispatcher "
        "and worker started for the run"), default_text=lambda: "in process")
    # compile only: N > 1 runs the Trainer step as a Training Operator TFJob of N workers
    # (pipeline/kubeflow/training/trainer_launcher.py); the step waits at most trainer_job_timeout seconds for it.
    trainer_workers: int = setting(1, flag="--trainer-workers", low=1, high=1024, metavar="N", commands={"compile"},
                                   group=TRAINER_JOB, help=(
        "N > 1: the Trainer step starts a TFJob of N pods of --image (1 Chief + N-1 Workers, TF_CONFIG set by the "
        "operator, --strategy multi_worker, each with the --trainer-* pod settings), waits for it and passes the "
        "chief's model on to the Evaluator; needs the Training Operator and kubeflow/tfjob-rbac.yaml (1: train in "
        "the step's own pod)"))
    trainer_job_timeout: int = setting(DAY, flag="--trainer-job-timeout", low=1, high=30 * DAY, metavar="SECONDS",
                                       commands={"compile"}, group=TRAINER_JOB,
                                       help="the Trainer step deletes the TFJob and fails after this long")

    # Evaluation gate, on the family's key metric (ModelFamily.gate_metric)
    min_accuracy: float = resolved_setting(flag="--min-accuracy", low=0.0, high=1.0, help=_gate_help,
                                         default_text=_gate_floors, runtime=True)  # on the overall slice
    max_regression: float = setting(0.01, flag="--max-regression", low=0.0, high=1.0, runtime=True, help=(
        "bless only if the key metric is at most this much below the served model's (absolute)"))
    gate_margin: float = setting(0.01, flag="--gate-margin", low=-1.0, high=1.0, runtime=True, help=(
        "bless only if the key metric beats the family's reference predictor (cnn: logistic regression, seq2seq: the "
        "n-gram count models it does not contain; it must match the Kneser-Ney model it serves inside it) by this much "
        "(absolute; near 1.0 at most half the reference's error, and a score whose 95% interval clears the reference "
        "is enough; negative: may trail it)"
    ))  # references.json
    eval_batch: int = setting(256, flag="--eval-batch", low=1, high=8192, metavar="N", help=(
        "most eval examples per batch the Evaluator's model calls and TFMA hold at once; the Evaluator's memory "
        "grows with it times the model's output (a text model's probabilities over its vocabulary), twice with a "
        "served model to compare (docs/history/benchmarks-log.md, \"The Evaluator's memory\")"))
    push_inconclusive: bool = setting(False, flag="--push-inconclusive", help=(
        "push a model below the gate when the eval set is too small to tell it from the threshold (the summary's "
        "NOT ENOUGH EVIDENCE, models/common/intervals.py); default: push only a model that passes"))
    base_model: str | None = setting(None, flag="--base-model", metavar="HANDLE|DIR", help=(
        "cnn: train a new head on a pretrained image feature extractor: a TF Hub handle or URL (resolved where the "
        "Trainer runs; TFHUB_CACHE_DIR sets its cache) or a local SavedModel directory"),
        default_text=lambda: "a CNN from scratch")
    warm_start: bool = setting(False, flag="--warm-start", commands={"run", "compile"}, help=(
        "start training from the latest blessed model of this pipeline when it fits (same family, input shape and "
        "classes or vocabulary); otherwise train from scratch and say why"))  # pipeline/warm_start.py
    # Batch scoring (components/scoring.py): TFX's BulkInferrer on the blessed model, after the Evaluator.
    score_dir: str | None = setting(None, flag="--score", metavar="DIR", commands={"run", "compile"}, help=(
        "score every file below DIR (images for cnn, text files for seq2seq; local or a bucket URI) with the "
        "blessed model: one row per file in scores.csv and scores.parquet (nothing when the model is not blessed)"),
        default_text=lambda: "no scoring")

    # Transform's pre-/post-transform statistics cost time on every run, and nothing here reads them
    # (StatisticsGen already describes the input). On for inspecting features in TFDV.
    follow_links: bool = setting(False, flag="--follow-links", commands=DATA_COMMANDS, help=(
        "read what a symbolic link inside --data or --score points to outside it (by default such links are "
        "named in the summary and not read)"))
    transform_statistics: bool = setting(False, flag="--transform-statistics", help=(
        "let Transform compute pre-/post-transform statistics for TFDV (a longer Transform; off by default since "
        "StatisticsGen already describes the input)"))

    # Data validation: a pinned schema file makes ExampleValidator stop runs on anomalies (`run` pins its own).
    schema_file: str | None = setting(None, flag="--schema", commands={"compile"}, help=(
        "curated schema.pbtxt URI to validate data against (e.g. the one `run` pinned under output/schema/)"),
        default_text=lambda: "infer it every run")

    # Hyperparameter search (pipeline/tuning.py): None = off. Steps/budget/algorithm only
    # with trials; --hyperparameters FILE reuses a past search instead.
    tune_trials: int | None = setting(None, flag="--tune-trials", low=1, high=MAX_TRIALS, metavar="N", group=TUNING,
                                      help="search N hyperparameter settings before training and train with the best",
                                      default_text=lambda: "off, the family's defaults")
    tune_steps: int | None = setting(None, flag="--tune-steps", low=1, high=MAX_STEPS, metavar="N", group=TUNING,
                                     help="training steps per trial, on a subsample of train",
                                     default_text=lambda: str(DEFAULT_TUNE_STEPS))
    tune_budget: float | None = setting(None, flag="--tune-budget", low=0.1, high=MAX_BUDGET_MINUTES, metavar="MINUTES",
                                        group=TUNING, help=(
        "stop the search after this wall time with the best trial so far (checked between trials)"),
        default_text=lambda: "no limit")
    tune_algorithm: str | None = setting(None, flag="--tune-algorithm", choices=ALGORITHMS, group=TUNING,
                                         help="KerasTuner's search algorithm (random search, Bayesian "
                                         "optimisation, Hyperband)",
                                         default_text=lambda: "random")
    hyperparameters_file: str | None = setting(None, flag="--hyperparameters", metavar="FILE", group=TUNING, help=(
        "train with the best hyperparameters of an earlier search (its best_hyperparameters.txt, imported by TFX's "
        "Importer) instead of searching"))
    # compile only: N > 1 runs the Tuner step's trials in a TFJob of a KerasTuner oracle and N trial
    # workers (pipeline/kubeflow/training/tuner_launcher.py); the step waits at most tune_job_timeout seconds for it.
    tune_workers: int = setting(1, flag="--tune-workers", low=1, high=1024, metavar="N", commands={"compile"},
                                group=TUNER_JOB, help=(
        "with --tune-trials, N > 1: the Tuner step starts a TFJob of a KerasTuner oracle (the Chief, runs no "
        "trials) and N Workers running trials in parallel (pods of --image with the --trainer-* settings), waits "
        "for it and hands the best hyperparameters to the Trainer; needs the Training Operator and "
        "kubeflow/tfjob-rbac.yaml (1: search in the step's own pod)"))
    tune_job_timeout: int = setting(DAY, flag="--tune-job-timeout", low=1, high=30 * DAY, metavar="SECONDS",
                                    commands={"compile"}, group=TUNER_JOB,
                                    help="the Tuner step deletes its TFJob and fails after this long")

    # Orchestration
    beam_mode: str = setting("auto", flag="--beam-mode", choices=BEAM_MODES, help=(
        "DirectRunner mode; auto = multi_processing from 50k examples on machines with 3+ cores, else in_memory"))
    beam_workers: int = setting(flag="--beam-workers", low=1, high=1024, default_factory=lambda: os.cpu_count() or 1,
                                help=("multi_processing's worker processes; in a local in_memory run, "
                                      "StatisticsGen's threads"),
                                default_text=lambda: "CPU count")
    beam_args: list[str] = setting(flag="--beam-arg", repeatable=True, metavar="ARG", default_factory=list, help=(
        "extra Beam pipeline arg, repeatable, e.g. --beam-arg=--runner=FlinkRunner"))
    enable_cache: bool = setting(True, flag="--no-cache", negate=True, help="re-run every component")

    def __post_init__(self) -> None:
        family = get_family(self.model)  # an unknown name raises, listing the registered ones
        self.family_settings = family.settings(self.family_settings)
        for name in ("epochs", "batch_size", "learning_rate", "min_accuracy"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(family.defaults, name))
        check_values(self)  # every declared range and choice; the message names the flag, value and range
        for name in ("train_buckets", "eval_buckets"):
            if getattr(self, name) < 1:
                raise ConfigError(name, f"must be >= 1, got {getattr(self, name)}")
        if self.trainer_workers > 1:
            if self.strategy not in ("mirrored", "multi_worker"):
                raise ConfigError("--trainer-workers", f"trains under --strategy multi_worker (one replica per worker "
                                  f"pod); drop --strategy {self.strategy}.")
            self.strategy = "multi_worker"
        for flag, name in (("--pipeline-name", self.pipeline_name), ("--serving-name", self.serving_model_name)):
            if name is not None:
                check_name(flag, name)
        if self.profile and not _is_batch_range(self.profile):
            raise ConfigError("--profile", f"takes two batch numbers START,END (e.g. 10,20), got {self.profile!r}")
        check_options(self)
        if self.hyperparameters_file:
            read_hyperparameters(self.hyperparameters_file, self.model)  # a bad file stops here, before any work
        if not _is_uri(self.output_dir):
            self.output_dir = os.path.abspath(self.output_dir)
        check_inputs_beside_output(self.output_dir, self.data, self.score_dir)
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

    def component_beam_args(self, num_examples: int) -> dict[str, list[str]]:
        """Beam args for single components on top of :meth:`beam_pipeline_args` (local runs): in_memory, the
        ``THREADED_IN_MEMORY`` components on --beam-workers threads, unless a --beam-arg chooses the
        runner, its mode or its workers."""
        if self.direct_running_mode(num_examples) != "in_memory" or self.beam_workers < 2:
            return {}
        if any(arg.startswith(("--runner", "--direct_running_mode", "--direct_num_workers"))
               for arg in self.beam_args):
            return {}
        return {name: [f"--direct_num_workers={self.beam_workers}"] for name in THREADED_IN_MEMORY}

"""The command line's arguments: the parser and the config it fills.

The run settings' flags (help, range, default) come from their one declaration in
pipeline/config.py and the families' registrations (pipeline/settings.py), so a new setting or a new
family shows up here without an edit; this module adds only what is not a setting of the pipeline
(where to write, what to deploy, which model to ask).
Nothing here imports TensorFlow: ``--help`` stays instant.
"""
import argparse
from typing import NoReturn

from stackenv import text_out
from stackenv.errors import ConfigError

from pipeline import config_file, families, settings
from pipeline.config import PipelineConfig

OUTPUT_HELP = ("output directory: pipeline root, MLMD, prepared data and serving/<model>/<version> "
               "(default: %(default)s)")


class ExactParser(argparse.ArgumentParser):
    """A parser that takes each flag only as spelled in full.

    argparse's default (``allow_abbrev=True``) reads an unknown flag that is the prefix of exactly one
    flag as that flag, so ``--conf team.yaml`` could be taken for ``--config`` today and for a new flag that
    shares the prefix tomorrow; worse, a prefix silently matching an unintended flag changes a run without a
    word. Every parser here (the subcommands inherit the class) refuses abbreviations, and an unknown flag
    that is the start of real ones is named with them.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._typed = list(args) if args is not None else []  # what an unknown flag is looked up in
        parsed, extras = super().parse_known_args(args, namespace)
        self._command = getattr(parsed, "command", None)  # whose flags an unknown one is compared with
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        chosen = _subparsers(self).get(getattr(self, "_command", None) or "")
        parsers = [self] + ([chosen] if chosen else [])
        super().error(message + abbreviation_hint(getattr(self, "_typed", []), parsers))


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next((dict(action.choices) for action in parser._actions
                 if isinstance(action, argparse._SubParsersAction)), {})


def abbreviation_hint(typed: list[str], parsers: list[argparse.ArgumentParser]) -> str:
    """`` (flags are spelled in full: --conf is the start of --config ...)`` when a typed flag is no flag of
    ``parsers`` but the start of some, else ""."""
    options = {option for parser in parsers for action in parser._actions for option in action.option_strings}
    for token in typed:
        if token == "--":
            break
        flag = token.split("=", 1)[0]
        if not flag.startswith("--") or flag in options:
            continue
        full = sorted(option for option in options if option.startswith(flag))
        if full:
            return (f" (flags are spelled in full: {flag} is the start of {' or '.join(full)}; "
                    f"write {full[0]} if that is what you meant)")
    return ""


def _add_settings(parser: argparse.ArgumentParser, command: str, config_type: type = PipelineConfig) -> None:
    """The run settings ``command`` takes (declared once in pipeline/config.py), then every registered family's
    own (pipeline/families/); a flag two families declare is added once."""
    added: set[str] = set()
    config_file.add_argument(parser)
    settings.add_arguments(parser, config_type, command, added)
    for family in families.FAMILIES.values():
        settings.add_arguments(parser, family.settings_type, command, added)


def parse_args(argv: list[str], config_type: type = PipelineConfig) -> argparse.Namespace:
    """``argv`` parsed, a ``--config`` file's settings first (pipeline/config_file.py)."""
    from pipeline.kubeflow.deploy_settings import DeploySettings, LoginSettings

    parser = build_parser(config_type)
    declarations = [config_type, *(family.settings_type for family in families.FAMILIES.values()), DeploySettings,
                    LoginSettings]
    return parser.parse_args(config_file.expand(argv, parser, declarations))


def build_parser(config_type: type = PipelineConfig) -> argparse.ArgumentParser:
    """The whole command line; ``config_type``: the settings declarations the pipeline commands take."""
    parser = ExactParser(prog="python -m pipeline", description=(
        "TFX pipeline: ExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> "
        "Transform -> Trainer -> Evaluator -> Pusher, run locally on Apache Beam."))
    parser.add_argument("-v", "--verbose", action="store_true", help="show TFX/Beam/TF logs")
    commands = parser.add_subparsers(dest="command", required=True)
    for add_pipeline_command in (_run, _prepare, _compile, _tfjob):
        add_pipeline_command(commands, config_type)
    for add_command in (_predict, _generate, _deploy, _report, _models, _rollback, _beam_pool, _tensorboard):
        add_command(commands)
    return parser


def _run(commands, config_type: type) -> None:
    run = commands.add_parser("run", help="prepare data and run the pipeline locally",
                              description="Prepare the data, run the pipeline on Apache Beam, print a summary. "
                              "For Kubeflow use `compile` and `deploy`.")
    _add_settings(run, "run", config_type)
    run.add_argument("--output", default="output", help=OUTPUT_HELP)
    run.add_argument("--accept-schema-change", action="store_true",
                     help="the data changed on purpose: re-infer the schema from it (instead of validating "
                     "against the pinned one) and pin the new one after the run")


def _prepare(commands, config_type: type) -> None:
    prepare = commands.add_parser("prepare", help="only convert a data source to TFRecords",
                                  description="Convert a data source to the TFRecords the pipeline reads and "
                                  "print their directory (e.g. to upload it for Kubeflow).")
    _add_settings(prepare, "prepare", config_type)
    prepare.add_argument("--output", default="output", help=OUTPUT_HELP)


def _compile(commands, config_type: type) -> None:
    from pipeline.kubeflow.compile_settings import CompileTarget

    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines (KFP v2)",
                                   description="Compile the same pipeline graph to a KFP v2 PipelineSpec YAML "
                                   "that `deploy` (or kfp.Client().upload_pipeline) uploads.")
    _add_settings(compile_, "compile", config_type)
    settings.add_arguments(compile_, CompileTarget, "compile")
    _add_step_settings_arguments(compile_)


def _tfjob(commands, config_type: type) -> None:
    from pipeline.kubeflow.training.tfjob import TFJobSettings

    tfjob = commands.add_parser("tfjob", help="write a Kubeflow TFJob that trains on N workers",
                                description="Write a Kubeflow Training Operator TFJob manifest (Chief + Workers, "
                                "TF_CONFIG set by the operator) whose pods run the Trainer's run_fn under "
                                "MultiWorkerMirroredStrategy on the Transform outputs of a pipeline run, with the "
                                "Trainer settings this pipeline would use. Apply it with kubectl apply -f.")
    _add_settings(tfjob, "tfjob", config_type)
    tfjob.add_argument("--output", default="output", help="where the data is prepared to read its shape "
                       "(default: %(default)s)")
    settings.add_arguments(tfjob, TFJobSettings, "tfjob")
    tfjob.add_argument("--to", default="kubeflow/tfjob.yaml", help="manifest path (default: %(default)s)")


def _predict(commands) -> None:
    predict = commands.add_parser("predict", help="classify image files with a pushed model",
                                  description="Classify images through the pushed model's predict_image signature.")
    predict.add_argument("--model-dir", required=True, help="a serving model dir (<serving>/<model>, newest "
                         "version is used) or one version directory")
    predict.add_argument("images", nargs="+", help="image files (PNG/JPEG)")
    predict.add_argument("--tflite", action="store_true", help="run the version's TFLite model (written by the "
                         "Pusher beside the SavedModel) with TensorFlow's TFLite interpreter instead of the SavedModel")
    predict.add_argument("--quantization", choices=("float16", "int8"), default=None,
                         help="with --tflite: which TFLite model (default: float16)")


def _generate(commands) -> None:
    generate = commands.add_parser("generate", help="continue text prompts with a pushed seq2seq model",
                                   description="Continue prompts through the pushed model's generate signature "
                                   "(the same graph TF Serving runs: tokenization, vocabulary and decoding).")
    generate.add_argument("--model-dir", required=True, help="a serving model dir (<serving>/<model>, newest "
                          "version is used) or one version directory")
    generate.add_argument("prompts", nargs="+", help="text to continue")
    generate.add_argument("--max-tokens", type=int, default=20, help="tokens to generate: each is appended to the "
                          "context and generation goes on until this many (default: %(default)s, capped at 256 "
                          "by the model) or a --stop-at token")
    generate.add_argument("--stop-at", default="", metavar="TOKENS", help="space-separated tokens that end a "
                          "continuation, e.g. '. ? !' for one sentence (default: none, generate --max-tokens)")
    generate.add_argument("--top-k", type=int, default=1, help="1 = greedy; K > 1 samples among the K most "
                          "likely tokens (default: %(default)s)")
    generate.add_argument("--temperature", type=float, default=1.0,
                          help="sampling temperature for --top-k > 1 (default: %(default)s)")
    generate.add_argument("--show-scores", action="store_true", help="print each generated token with the "
                          "probability the model gave it, and their geometric mean")
    _add_generate_rules(generate)


def _deploy(commands) -> None:
    from pipeline.kubeflow.deploy_settings import DeploySettings, LoginSettings

    deploy_ = commands.add_parser("deploy", help="upload a compiled pipeline to Kubeflow Pipelines, optionally run it",
                                  description="Upload a KFP v2 PipelineSpec YAML (from `compile`) as a new pipeline, "
                                  "or as a new version of the pipeline with that name; with --run, start a run of "
                                  "that version.")
    config_file.add_argument(deploy_)  # deploy's settings may live in the file too (docs/settings.md)
    settings.add_arguments(deploy_, DeploySettings, "deploy")
    settings.add_arguments(deploy_, LoginSettings, "deploy")


def _report(commands) -> None:
    report = commands.add_parser("report", help="write an HTML report of the latest evaluation", description=(
        "Find the latest evaluation of a run through ML Metadata and write a self-contained HTML report "
        "(metrics per slice, candidate vs baseline, validation, per-family pictures) and its metrics as JSON."))
    report.add_argument("--output", default="output", help="output directory of a run (default: %(default)s)")
    report.add_argument("--to", default=None, help="HTML file to write (default: <output>/report.html); "
                        "the metrics go beside it as <name>.json")
    report.add_argument("--require-latest", action="store_true",
                        help="exit non-zero when the latest run failed (the report then shows an earlier run)")
    report.add_argument("--pipeline-name", default=None, help="default: the pipeline that ran last in --output")


def _models(commands) -> None:
    models = commands.add_parser("models", help="list pushed model versions with their metrics",
                                 description="List the versions in a TF Serving model directory, newest "
                                 "first, with push time, key metrics and pipeline run id.")
    models.add_argument("--serving-dir", required=True, help="model base dir, e.g. output/serving/cnn")


def _rollback(commands) -> None:
    rollback = commands.add_parser("rollback", help="serve the previous model version again",
                                   description="Make the previous version the served one: the newest "
                                   "version is renamed to .rolled-back-<version> (TF Serving's default "
                                   "policy serves the highest numeric version). Rename it back to undo.")
    rollback.add_argument("--serving-dir", required=True, help="model base dir, e.g. output/serving/cnn")


def _beam_pool(commands) -> None:
    pool = commands.add_parser("beam-pool", help="run a Beam SDK worker pool with this project's Python",
                               description="Start apache_beam's worker pool (for --environment_type=EXTERNAL) "
                               "so that the workers it starts use this interpreter and project, whatever is on "
                               "PATH. Ctrl-C stops it.")
    pool.add_argument("--port", type=int, required=True, help="TCP port the pool listens on")


def _tensorboard(commands) -> None:
    tensorboard = commands.add_parser("tensorboard", help="serve the last run's training logs in TensorBoard",
                                      description="Find the newest Trainer execution of a run through ML Metadata "
                                      "and serve its logs: per-epoch scalars, and the profiler trace when the "
                                      "run used --profile. Ctrl-C stops it.")
    tensorboard.add_argument("--output", default="output", help="output directory of a run (default: %(default)s)")
    tensorboard.add_argument("--pipeline-name", default=None, help="default: the pipeline that ran last in --output")
    tensorboard.add_argument("--port", type=int, default=6006, help="default: %(default)s")
    tensorboard.add_argument("--host", default="127.0.0.1",
                             help="address to listen on (default: %(default)s; 0.0.0.0 for every interface)")


def _add_step_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Pod settings compiled into the package, declared in pipeline/kubeflow/platform.py."""
    from pipeline.kubeflow.platform import StepSettings

    settings.add_arguments(parser, StepSettings, "compile")


#: The folder flags whose paths TensorFlow, ML Metadata or protobuf open: each encodes a name as UTF-8 strictly.
LIBRARY_PATHS = {"output": "--output", "model_dir": "--model-dir", "serving_dir": "--serving-dir",
                 "pipeline_root": "--pipeline-root", "data": "--data", "score_dir": "--score"}


def check_library_paths(args: argparse.Namespace) -> None:
    """ConfigError for a folder flag whose name holds bytes that are not UTF-8 (``srv\\xff``), before anything
    runs: TensorFlow's file system, ML Metadata's store and the protos a run records take only UTF-8 names, so
    such a folder would end in an encoder's traceback midway. File names *inside* --data and --score may
    hold any bytes (data/walk.py); the folder a flag names may not."""
    for dest, flag in LIBRARY_PATHS.items():
        value = getattr(args, dest, None)
        if isinstance(value, str) and text_out.printable(value) != value:
            shown = text_out.printable(value)
            raise ConfigError(flag, f"{shown} holds bytes that are not UTF-8 (shown as \\xNN), and TensorFlow and "
                              "ML Metadata open only UTF-8 folder names. Nothing was written. Rename the folder to a "
                              "UTF-8 name (letters, digits, '-', '_' are safe), or choose another one.")


def step_settings_from_args(args: argparse.Namespace):
    """The pod settings of a parsed ``compile`` command line."""
    from pipeline.kubeflow.platform import StepSettings

    return StepSettings(**settings.values_from_args(args, StepSettings))


def _family_settings(args: argparse.Namespace) -> dict[str, object]:
    """The chosen family's settings from the parsed options (the parser has every family's)."""
    return settings.values_from_args(args, families.get_family(args.model).settings_type)


def config_from_args(args: argparse.Namespace, config_type: type = PipelineConfig) -> PipelineConfig:
    """The config of a parsed command line: every setting its subcommand took, by name (pipeline/settings.py)."""
    output_dir = getattr(args, "pipeline_root", None) or args.output
    return config_type(**settings.values_from_args(args, config_type), output_dir=output_dir,
                       family_settings=_family_settings(args))


def _add_generate_rules(generate: argparse.ArgumentParser) -> None:
    """``generate``'s sampling and repetition rules (models/seq2seq/decoding.py): generate-only, not run settings."""
    generate.add_argument("--top-p", type=float, default=1.0, help="with --top-k > 1: sample only among the most "
                          "likely tokens whose probabilities add up to P (default: %(default)s, all K)")
    generate.add_argument("--repetition-penalty", type=float, default=1.2, help="lower the odds of tokens already in "
                          "the text; 1 = off (default: %(default)s)")
    generate.add_argument("--no-repeat-ngram", type=int, default=3, metavar="N", help="never repeat a sequence of N "
                          "tokens; 0 = off (default: %(default)s)")
    generate.add_argument("--seed", type=int, default=0, help="seed of the sampling: the same seed, prompt and "
                          "model give the same text (default: %(default)s)")
    generate.add_argument("--sentence", action="store_true", help="stop each continuation after its first "
                          "sentence (same as --stop-at '. ? !')")

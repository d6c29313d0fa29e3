"""The command line's arguments: the parser and the config it fills.

The run settings' flags (help, range, default) come from their one declaration in
pipeline/config.py and the families' registrations (pipeline/settings.py), so a new setting or a new
family shows up here without an edit; this module adds only what is not a setting of the pipeline
(where to write, what to deploy, which model to ask).
Nothing here imports TensorFlow: ``--help`` stays instant.
"""
import argparse

from pipeline import config_file, families, settings
from pipeline.config import PipelineConfig

OUTPUT_HELP = ("output directory: pipeline root, MLMD, prepared data and serving/<model>/<version> "
               "(default: %(default)s)")


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
    parser = build_parser(config_type)
    declarations = [config_type, *(family.settings_type for family in families.FAMILIES.values())]
    return parser.parse_args(config_file.expand(argv, parser, declarations))


def build_parser(config_type: type = PipelineConfig) -> argparse.ArgumentParser:
    """The whole command line; ``config_type``: the settings declarations the pipeline commands take."""
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=(
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
    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines (KFP v2)",
                                   description="Compile the same pipeline graph to a KFP v2 PipelineSpec YAML "
                                   "that `deploy` (or kfp.Client().upload_pipeline) uploads.")
    _add_settings(compile_, "compile", config_type)
    compile_.add_argument("--image", required=True, help="pipeline image (built from kubeflow/Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="object-store URI for all outputs, e.g. "
                          "gs://bucket/tfx (run artifacts under tfx/, serving/<model>/<version>); recorded "
                          "in the package as its defaultPipelineRoot, which `deploy` passes to each run")
    compile_.add_argument("--output", dest="package", default=None,
                          help="package path (default: kubeflow/<pipeline-name>.yaml)")
    _add_step_settings_arguments(compile_)
    _add_kfp_backend_arguments(compile_)


def _tfjob(commands, config_type: type) -> None:
    tfjob = commands.add_parser("tfjob", help="write a Kubeflow TFJob that trains on N workers",
                                description="Write a Kubeflow Training Operator TFJob manifest (Chief + Workers, "
                                "TF_CONFIG set by the operator) whose pods run the Trainer's run_fn under "
                                "MultiWorkerMirroredStrategy on the Transform outputs of a pipeline run, with the "
                                "Trainer settings this pipeline would use. Apply it with kubectl apply -f.")
    _add_settings(tfjob, "tfjob", config_type)
    tfjob.add_argument("--output", default="output", help="where the data is prepared to read its shape "
                       "(default: %(default)s)")
    tfjob.add_argument("--image", required=True, help="pipeline image (built from kubeflow/Dockerfile)")
    tfjob.add_argument("--workers", type=int, default=2, help="training processes, the chief included "
                       "(default: %(default)s)")
    tfjob.add_argument("--transformed-examples", required=True, metavar="URI",
                       help="a Transform run's transformed_examples artifact (holding Split-train/, Split-eval/)")
    tfjob.add_argument("--transform-graph", required=True, metavar="URI", help="the same run's transform_graph")
    tfjob.add_argument("--model-dir", required=True, metavar="URI",
                       help="where the chief writes the model (URI/Format-Serving) and logs (URI/model_run)")
    tfjob.add_argument("--name", default="trainer", help="TFJob name (default: %(default)s)")
    tfjob.add_argument("--namespace", default="kubeflow", help="(default: %(default)s)")
    tfjob.add_argument("--service-account", default=None, help="Kubernetes service account of the pods")
    tfjob.add_argument("--cpu", default=None, help="CPU request and limit per worker, e.g. 4")
    tfjob.add_argument("--memory", default=None, help="memory request and limit per worker, e.g. 8Gi")
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
    _add_generate_rules(generate)


def _deploy(commands) -> None:
    deploy_ = commands.add_parser("deploy", help="upload a compiled pipeline to Kubeflow Pipelines, optionally run it",
                                  description="Upload a KFP v2 PipelineSpec YAML (from `compile`) as a new pipeline, "
                                  "or as a new version of the pipeline with that name; with --run, start a run of "
                                  "that version.")
    deploy_.add_argument("--host", required=True, help="KFP UI/API URL, e.g. http://localhost:8080 after "
                         "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80`")
    deploy_.add_argument("--package", default=None, help="compiled pipeline YAML (needed unless --list-schedules "
                         "or --delete-schedule)")
    deploy_.add_argument("--pipeline-name", default=None, help="default: the package's pipelineInfo.name")
    deploy_.add_argument("--experiment", default="Default",
                         help="experiment for --run, created if missing (default: %(default)s)")
    deploy_.add_argument("--run", action="store_true", help="start a run of the uploaded version")
    deploy_.add_argument("--namespace", default=None,
                         help="Kubeflow profile namespace (needed with --run on multi-user Kubeflow)")
    deploy_.add_argument("--run-name", default=None, help="default: '<pipeline name> <UTC time>'")
    deploy_.add_argument("--pipeline-root", default=None, help="artifact root of the run (default: the "
                         "package's defaultPipelineRoot, set by `compile --pipeline-root`)")
    deploy_.add_argument("--cache", choices=("on", "off"), default=None, help="override every step's KFP "
                         "caching in the uploaded version (default: as compiled)")
    deploy_.add_argument("--service-account", default=None, help="Kubernetes service account of the run's pods")
    deploy_.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                         help="a runtime parameter of the run (and schedule), e.g. epochs=3 or "
                         "data=gs://bucket/new-data; the package lists them (repeatable)")
    deploy_.add_argument("--wait", action="store_true", help="with --run: follow the run, print each step's "
                         "state, exit non-zero unless it succeeds")
    deploy_.add_argument("--wait-timeout", type=float, default=3600.0,
                         help="seconds --wait follows the run at most (default: %(default)s)")
    deploy_.add_argument("--schedule", default=None, metavar="CRON",
                         help="also create a recurring run of the uploaded version (continuous training), in "
                         "--experiment: six cron fields, seconds first, e.g. '0 0 2 * * *' (02:00 daily), or @daily")
    deploy_.add_argument("--list-schedules", action="store_true", help="list the recurring runs and exit")
    deploy_.add_argument("--delete-schedule", default=None, metavar="ID", help="delete a recurring run and exit")
    add_login_arguments(deploy_)
    add_cluster_check_arguments(deploy_)


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


def step_settings_from_args(args: argparse.Namespace):
    """The pod settings of a parsed ``compile`` command line."""
    from pipeline.kubeflow.platform import StepSettings

    return StepSettings(**settings.values_from_args(args, StepSettings))


def _add_kfp_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """compile only: the target KFP backend and what depends on it (pipeline/kubeflow/backend_version.py)."""
    from pipeline.kubeflow.backend_version import DEFAULT_KFP_VERSION, MAX_RETRIES

    group = parser.add_argument_group("Kubeflow Pipelines backend")
    group.add_argument("--kfp-version", default=DEFAULT_KFP_VERSION, metavar="VERSION",
                       help="the cluster's KFP backend version; features it would ignore are refused, and one "
                       "outside the tested versions is a warning (default: %(default)s, the newest tested)")
    group.add_argument("--retries", type=int, default=0, metavar="N",
                       help=f"retry a failed step up to N times with backoff (0-{MAX_RETRIES}; needs KFP backend "
                       "2.4.1+) (default: %(default)s)")


def _family_settings(args: argparse.Namespace) -> dict[str, object]:
    """The chosen family's settings from the parsed options (the parser has every family's)."""
    return settings.values_from_args(args, families.get_family(args.model).settings_type)


def config_from_args(args: argparse.Namespace, config_type: type = PipelineConfig) -> PipelineConfig:
    """The config of a parsed command line: every setting its subcommand took, by name (pipeline/settings.py)."""
    output_dir = getattr(args, "pipeline_root", None) or args.output
    return config_type(**settings.values_from_args(args, config_type), output_dir=output_dir,
                       family_settings=_family_settings(args))


def add_cluster_check_arguments(parser: argparse.ArgumentParser) -> None:
    """`deploy`'s pre-flight through the Kubernetes API (pipeline/kubeflow/cluster_checks.py): deploy-only, not a
    run setting."""
    parser.add_argument("--skip-cluster-checks", action="store_true", help="do not read the run namespace's "
                        "secrets, kfp-launcher ConfigMap and training-job resources through this machine's "
                        "kubeconfig before a run or schedule (e.g. when its current context is another cluster)")


def add_login_arguments(parser: argparse.ArgumentParser) -> None:
    """How `deploy` logs in to a Kubeflow behind Dex, IAP or a token check (pipeline/kubeflow/login.py); one of
    the first five, plus the TLS check. Compile-free options: not run settings."""
    login = parser.add_argument_group("login (multi-user Kubeflow)")
    login.add_argument("--token-file", default=None, metavar="PATH", help="a file holding a bearer token, e.g. "
                       "`kubectl -n NS create token default-editor --audience=pipelines.kubeflow.org` (default: the "
                       "file $KF_PIPELINES_SA_TOKEN_PATH names, if set)")
    login.add_argument("--token-env", default=None, metavar="NAME", help="an environment variable holding the bearer "
                       "token")
    login.add_argument("--dex-user", default=None, metavar="EMAIL", help="log in through Dex as this user (the "
                       "password from --dex-password-env, default $KFP_DEX_PASSWORD, or --dex-password-file)")
    login.add_argument("--dex-password-env", default=None, metavar="NAME", help="environment variable holding the "
                       "Dex password (default: KFP_DEX_PASSWORD)")
    login.add_argument("--dex-password-file", default=None, metavar="PATH", help="a file holding the Dex password")
    login.add_argument("--session-cookie-file", default=None, metavar="PATH", help="a file holding a logged-in "
                       "browser's session cookie, NAME=VALUE (authservice_session=..., oauth2_proxy_kubeflow=...)")
    login.add_argument("--iap-client-id", default=None, metavar="ID", help="IAP on GKE: the OAuth client id of the "
                       "IAP in front of Kubeflow; the identity token comes from Google's default credentials")
    login.add_argument("--ca-bundle", default=None, metavar="PATH", help="PEM file of the CA that signed the "
                       "endpoint's TLS certificate (a private CA)")
    login.add_argument("--no-verify-tls", dest="verify_tls", action="store_false", help="do not check the "
                       "endpoint's TLS certificate (trusted networks only)")


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

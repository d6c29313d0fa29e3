"""The command line's arguments: the parser and the config it fills.

Help text about model families (``--model``, ``--data``, the per-family defaults) and the
family-specific options (``--image-size``, ``--vocab-size``, ...) are generated from the
registrations in ``pipeline/families/``, so a new family shows up here without an edit.
Nothing here imports TensorFlow: ``--help`` stays instant.
"""
import argparse
import os
from collections.abc import Callable

from pipeline import families
from pipeline.config import BEAM_MODES, PipelineConfig

OUTPUT_HELP = ("output directory: pipeline root, MLMD, prepared data and serving/<model>/<version> "
               "(default: %(default)s)")


def _per_family(value: Callable[[families.ModelFamily], str]) -> str:
    """``cnn 15, seq2seq 6``; a single value when every family has the same one."""
    values = {family.name: value(family) for family in families.FAMILIES.values()}
    if len(set(values.values())) == 1:
        return next(iter(values.values()))
    return ", ".join(f"{name} {text}" for name, text in values.items())


def _model_help() -> str:
    described = [f"{f.name} ({f.description})" for f in families.FAMILIES.values()]
    listed = described[0] if len(described) == 1 else f"{', '.join(described[:-1])} or {described[-1]}"
    return f"model family: {listed}"


def data_help() -> str:
    return ". ".join(f"{f.name}: {f.data_help}" for f in families.FAMILIES.values())


def _add_family_options(parser: argparse.ArgumentParser) -> None:
    """Every registered family's own options; one flag declared by two families is added once."""
    added = set()
    for family in families.FAMILIES.values():
        for dest, flag, kwargs in families.cli_options(family.settings_type):
            if flag not in added:
                added.add(flag)
                parser.add_argument(flag, dest=dest, **kwargs)


def _add_data_arguments(parser: argparse.ArgumentParser, data_help_text: str = "") -> None:
    parser.add_argument("--model", choices=families.family_names(), default=families.DEFAULT_MODEL,
                        help=_model_help())
    parser.add_argument("--data", default=None, help=data_help_text or data_help())
    _add_family_options(parser)


def _add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = PipelineConfig.__dataclass_fields__
    d = lambda name: defaults[name].default  # noqa: E731
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--epochs", type=int, default=None, help="passes over the training split "
                       f"(default: {_per_family(lambda f: str(f.defaults.epochs))})")
    steps.add_argument("--train-steps", type=int, default=None, help="total training steps (overrides --epochs)")
    parser.add_argument("--eval-steps", type=int, default=None, help="validation steps during training "
                        "(default: one pass over the eval split)")
    parser.add_argument("--batch-size", type=int, default=None, help="batch size per replica "
                        f"(default: {_per_family(lambda f: str(f.defaults.batch_size))})")
    parser.add_argument("--learning-rate", type=float, default=None, help="Adam learning rate "
                        f"(default: {_per_family(lambda f: str(f.defaults.learning_rate))})")
    parser.add_argument("--strategy", choices=("mirrored", "multi_worker", "default"), default=d("strategy"),
                        help="tf.distribute strategy (multi_worker reads TF_CONFIG) (default: %(default)s)")
    parser.add_argument("--data-service", default="", metavar="auto|HOST:PORT",
                        help="read the Trainer's input through tf.data service: a dispatcher's address, or "
                             "auto for a local dispatcher and worker started for the run (default: in process)")
    parser.add_argument("--seed", type=int, default=d("seed"))
    parser.add_argument("--xla", action="store_true", help="compile the train step with XLA (jit_compile)")
    parser.add_argument("--profile", default=None, metavar="START,END",
                        help="write a TensorBoard profiler trace of training batches START..END into the "
                        "Trainer's model_run dir (view: tensorboard --logdir <it>, Profile tab)")
    key_metrics = ", ".join(f"{f.name}: {f.gate_metric_label.lower()}" for f in families.FAMILIES.values())
    floors = _per_family(lambda f: f"{f.defaults.min_accuracy}"
                         + (f", {f.defaults.min_accuracy_note}" if f.defaults.min_accuracy_note else ""))
    parser.add_argument("--min-accuracy", type=float, default=None,
                        help=f"bless only if the overall key metric ({key_metrics}) >= this, on top of "
                        f"--gate-margin (default: {floors})")
    parser.add_argument("--gate-margin", type=float, default=d("gate_margin"),
                        help="bless only if the key metric beats the family's reference predictor "
                        "(cnn: logistic regression, seq2seq: bigram counts) by this much (absolute; negative: "
                        "may trail it; default: %(default)s)")
    parser.add_argument("--base-model", default=None, metavar="HANDLE|DIR",
                        help="cnn: train a new head on a pretrained image feature extractor: a TF Hub "
                        "handle or URL (resolved where the Trainer runs; TFHUB_CACHE_DIR sets its cache) "
                        "or a local SavedModel directory (default: a CNN from scratch)")
    parser.add_argument("--max-regression", type=float, default=d("max_regression"),
                        help="bless only if accuracy is at most this much below the served "
                        "model (absolute; default: %(default)s)")
    parser.add_argument("--beam-mode", choices=BEAM_MODES, default="auto",
                        help="DirectRunner mode; auto = multi_processing from 50k examples on machines "
                        "with 3+ cores, else in_memory (default: %(default)s)")
    parser.add_argument("--transform-statistics", action="store_true",
                        help="let Transform compute pre-/post-transform statistics for TFDV (a longer "
                        "Transform; off by default since StatisticsGen already describes the input)")
    parser.add_argument("--beam-workers", type=int, default=os.cpu_count() or 1,
                        help="multi_processing workers (default: CPU count, %(default)s)")
    parser.add_argument("--beam-arg", action="append", default=[], metavar="ARG",
                        help="extra Beam pipeline arg, repeatable, e.g. --beam-arg=--runner=FlinkRunner")
    parser.add_argument("--ingest", choices=("example-gen", "prepare"), default=d("ingest"),
                        help="example-gen: the pipeline's ExampleGen reads --data (local, gs://, s3://; "
                        "compile reads nothing); prepare: convert it locally first, then import the "
                        "TFRecords (default: %(default)s)")
    parser.add_argument("--span-pattern", default=None, metavar="PATTERN",
                        help="span folders inside --data, e.g. 'span-{SPAN}': the newest span is read "
                        "unless --spans says otherwise (example-gen ingestion)")
    parser.add_argument("--spans", type=_span_range, default=None, metavar="A-B",
                        help="read spans A to B (inclusive) of --span-pattern instead of the newest")
    _add_tuning_arguments(parser)
    parser.add_argument("--no-cache", action="store_true", help="re-run every component")
    parser.add_argument("--pipeline-name", default=None, help="default: <model>-pipeline")
    parser.add_argument("--serving-name", default=None, help="model name in the serving dir (default: --model)")


def _add_tuning_arguments(parser: argparse.ArgumentParser) -> None:
    """Hyperparameter search through TFX's Tuner (pipeline/tuning.py); off by default."""
    tuning = parser.add_argument_group("hyperparameter search (KerasTuner through TFX's Tuner)")
    tuning.add_argument("--tune-trials", type=int, default=None, metavar="N",
                        help="search N hyperparameter settings before training and train with the best "
                        "(default: off, the family's defaults)")
    tuning.add_argument("--tune-steps", type=int, default=None, metavar="N",
                        help="training steps per trial, on a subsample of train (default: 200)")
    tuning.add_argument("--tune-budget", type=float, default=None, metavar="MINUTES",
                        help="stop the search after this wall time with the best trial so far (checked "
                        "between trials; default: no limit)")
    tuning.add_argument("--tune-algorithm", default=None, metavar="random|bayesian|hyperband",
                        help="KerasTuner's search algorithm (default: random)")
    tuning.add_argument("--hyperparameters", default=None, metavar="FILE",
                        help="train with the best hyperparameters of an earlier search (its "
                        "best_hyperparameters.txt, imported by TFX's Importer) instead of searching")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=(
        "TFX pipeline: ExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> "
        "Transform -> Trainer -> Evaluator -> Pusher, run locally on Apache Beam."))
    parser.add_argument("-v", "--verbose", action="store_true", help="show TFX/Beam/TF logs")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="prepare data and run the pipeline locally",
                              description="Prepare the data, run the pipeline on Apache Beam, print a summary. "
                              "For Kubeflow use `compile` and `deploy`.")
    _add_data_arguments(run)
    run.add_argument("--output", default="output", help=OUTPUT_HELP)
    run.add_argument("--accept-schema-change", action="store_true",
                     help="the data changed on purpose: re-infer the schema from it (instead of validating "
                     "against the pinned one) and pin the new one after the run")
    _add_pipeline_arguments(run)
    run.add_argument("--warm-start", action="store_true",
                     help="start training from the latest blessed model of this pipeline when it fits (same "
                     "family, input shape and classes or vocabulary); otherwise train from scratch and say why")

    prepare = commands.add_parser("prepare", help="only convert a data source to TFRecords",
                                  description="Convert a data source to the TFRecords the pipeline reads and "
                                  "print their directory (e.g. to upload it for Kubeflow).")
    _add_data_arguments(prepare)
    prepare.add_argument("--output", default="output", help=OUTPUT_HELP)

    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines (KFP v2)",
                                   description="Compile the same pipeline graph to a KFP v2 PipelineSpec YAML "
                                   "that `deploy` (or kfp.Client().upload_pipeline) uploads.")
    _add_data_arguments(compile_, data_help_text=(
        "a PREPARED dataset directory (holding manifest.json), local or an object-store URI "
        "readable by the cluster; see `prepare` (default: the bundled data baked into the image)"))
    compile_.add_argument("--image", required=True, help="pipeline image (built from kubeflow/Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="object-store URI for all outputs, e.g. "
                          "gs://bucket/tfx (run artifacts under tfx/, serving/<model>/<version>); recorded "
                          "in the package as its defaultPipelineRoot, which `deploy` passes to each run")
    compile_.add_argument("--output", dest="package", default=None,
                          help="package path (default: kubeflow/<pipeline-name>.yaml)")
    compile_.add_argument("--schema", default=None, help="curated schema.pbtxt URI to validate data against "
                          "(e.g. the one `run` pinned under output/schema/); default: infer it every run")
    _add_pipeline_arguments(compile_)
    _add_step_settings_arguments(compile_)
    _add_trainer_workers_arguments(compile_)

    tfjob = commands.add_parser("tfjob", help="write a Kubeflow TFJob that trains on N workers",
                                description="Write a Kubeflow Training Operator TFJob manifest (Chief + Workers, "
                                "TF_CONFIG set by the operator) whose pods run the Trainer's run_fn under "
                                "MultiWorkerMirroredStrategy on the Transform outputs of a pipeline run, with the "
                                "Trainer settings this pipeline would use. Apply it with kubectl apply -f.")
    _add_data_arguments(tfjob)
    tfjob.add_argument("--output", default="output", help="where the data is prepared to read its shape "
                       "(default: %(default)s)")
    _add_pipeline_arguments(tfjob)
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

    predict = commands.add_parser("predict", help="classify image files with a pushed model",
                                  description="Classify images through the pushed model's predict_image signature.")
    predict.add_argument("--model-dir", required=True, help="a serving model dir (<serving>/<model>, newest "
                         "version is used) or one version directory")
    predict.add_argument("images", nargs="+", help="image files (PNG/JPEG)")

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

    report = commands.add_parser("report", help="write an HTML report of the latest evaluation", description=(
        "Find the latest evaluation of a run through ML Metadata and write a self-contained HTML report "
        "(metrics per slice, candidate vs baseline, validation, per-family pictures) and its metrics as JSON."))
    report.add_argument("--output", default="output", help="output directory of a run (default: %(default)s)")
    report.add_argument("--to", default=None, help="HTML file to write (default: <output>/report.html); "
                        "the metrics go beside it as <name>.json")
    report.add_argument("--require-latest", action="store_true",
                        help="exit non-zero when the latest run failed (the report then shows an earlier run)")
    report.add_argument("--pipeline-name", default=None, help="default: the pipeline that ran last in --output")

    models = commands.add_parser("models", help="list pushed model versions with their metrics",
                                 description="List the versions in a TF Serving model directory, newest "
                                 "first, with push time, key metrics and pipeline run id.")
    models.add_argument("--serving-dir", required=True, help="model base dir, e.g. output/serving/cnn")
    rollback = commands.add_parser("rollback", help="serve the previous model version again",
                                   description="Make the previous version the served one: the newest "
                                   "version is renamed to .rolled-back-<version> (TF Serving's default "
                                   "policy serves the highest numeric version). Rename it back to undo.")
    rollback.add_argument("--serving-dir", required=True, help="model base dir, e.g. output/serving/cnn")
    pool = commands.add_parser("beam-pool", help="run a Beam SDK worker pool with this project's Python",
                               description="Start apache_beam's worker pool (for --environment_type=EXTERNAL) "
                               "so that the workers it starts use this interpreter and project, whatever is on "
                               "PATH. Ctrl-C stops it.")
    pool.add_argument("--port", type=int, required=True, help="TCP port the pool listens on")
    tensorboard = commands.add_parser("tensorboard", help="serve the last run's training logs in TensorBoard",
                                      description="Find the newest Trainer execution of a run through ML Metadata "
                                      "and serve its logs: per-epoch scalars, and the profiler trace when the "
                                      "run used --profile. Ctrl-C stops it.")
    tensorboard.add_argument("--output", default="output", help="output directory of a run (default: %(default)s)")
    tensorboard.add_argument("--pipeline-name", default=None, help="default: the pipeline that ran last in --output")
    tensorboard.add_argument("--port", type=int, default=6006, help="default: %(default)s")
    tensorboard.add_argument("--host", default="127.0.0.1",
                             help="address to listen on (default: %(default)s; 0.0.0.0 for every interface)")
    return parser


def _add_step_settings_arguments(parser: argparse.ArgumentParser) -> None:
    """Pod settings compiled into the package (pipeline/kubeflow/platform.py)."""
    pods = parser.add_argument_group("pod settings (every step unless named Trainer)")
    for flag, what in (("--cpu-request", "CPU request, e.g. 500m"), ("--cpu-limit", "CPU limit, e.g. 2"),
                       ("--memory-request", "memory request, e.g. 2Gi"), ("--memory-limit", "memory limit, e.g. 8Gi"),
                       ("--trainer-cpu", "Trainer CPU request and limit"),
                       ("--trainer-memory", "Trainer memory request and limit")):
        pods.add_argument(flag, default=None, help=what)
    pods.add_argument("--trainer-gpus", type=int, default=0, help="GPUs for the Trainer (default: %(default)s)")
    pods.add_argument("--gpu-type", default="nvidia.com/gpu", help="accelerator resource (default: %(default)s)")
    pods.add_argument("--secret-env", action="append", default=[], metavar="SECRET:KEY=ENV",
                      help="a key of a Kubernetes secret as an environment variable of every step (repeatable)")
    pods.add_argument("--secret-volume", action="append", default=[], metavar="SECRET=/PATH",
                      help="a Kubernetes secret mounted as files in every step (repeatable)")
    pods.add_argument("--node-selector", action="append", default=[], metavar="LABEL=VALUE", help="(repeatable)")
    pods.add_argument("--toleration", action="append", default=[], metavar="KEY[=VALUE]:EFFECT", help="(repeatable)")
    pods.add_argument("--image-pull-secret", action="append", default=[], metavar="SECRET", help="(repeatable)")
    pods.add_argument("--s3-endpoint", default=None, help="S3/MinIO endpoint URL for an s3:// root, e.g. "
                      "http://minio-service.kubeflow:9000")
    pods.add_argument("--s3-secret", default=None, help="secret holding the S3 keys as accesskey/secretkey, "
                      "e.g. mlpipeline-minio-artifact (KFP's MinIO)")


def _add_trainer_workers_arguments(parser: argparse.ArgumentParser) -> None:
    """compile --trainer-workers: the Trainer step as a TFJob (pipeline/kubeflow/training/trainer_launcher.py)."""
    group = parser.add_argument_group("multi-worker Trainer (Kubeflow Training Operator TFJob)")
    group.add_argument("--trainer-workers", type=int, default=1, metavar="N",
                       help="N > 1: the Trainer step starts a TFJob of N pods of --image (1 Chief + N-1 Workers, "
                       "TF_CONFIG set by the operator, --strategy multi_worker, each with the --trainer-* pod "
                       "settings), waits for it and passes the chief's model on to the Evaluator; needs the "
                       "Training Operator and kubeflow/tfjob-rbac.yaml applied (default: %(default)s, train in "
                       "the step's own pod)")
    group.add_argument("--trainer-job-timeout", type=int, default=24 * 3600, metavar="SECONDS",
                       help="the Trainer step deletes the TFJob and fails after this long (default: %(default)s)")
    tune = parser.add_argument_group("parallel Tuner trials (Kubeflow Training Operator TFJob)")
    tune.add_argument("--tune-workers", type=int, default=1, metavar="N",
                      help="with --tune-trials, N > 1: the Tuner step starts a TFJob of a KerasTuner oracle (the "
                      "Chief, runs no trials) and N Workers running trials in parallel (pods of --image with the "
                      "--trainer-* settings), waits for it and hands the best hyperparameters to the Trainer; "
                      "needs the Training Operator and kubeflow/tfjob-rbac.yaml (default: %(default)s, search in "
                      "the step's own pod)")
    tune.add_argument("--tune-job-timeout", type=int, default=24 * 3600, metavar="SECONDS",
                      help="the Tuner step deletes its TFJob and fails after this long (default: %(default)s)")


def _family_settings(args: argparse.Namespace) -> dict[str, object]:
    """The chosen family's settings from the parsed options (the parser has every family's)."""
    family = families.get_family(args.model)
    return {dest: getattr(args, dest) for dest, _, _ in families.cli_options(family.settings_type)
            if hasattr(args, dest)}


def _span_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    if not (first.strip().isdigit() and (last or first).strip().isdigit()) or int(first) > int(last or first):
        raise argparse.ArgumentTypeError(f"{text!r} is not a span range: use A-B with A <= B, e.g. 1-1 or 3-5")
    return int(first), int(last or first)


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    output_dir = getattr(args, "pipeline_root", None) or args.output
    data = dict(model=args.model, data=args.data, output_dir=output_dir, family_settings=_family_settings(args))
    if not hasattr(args, "epochs"):  # `prepare`: data settings only
        return PipelineConfig(**data)
    return PipelineConfig(
        **data,
        pipeline_name=args.pipeline_name, serving_model_name=args.serving_name,
        epochs=args.epochs, train_steps=args.train_steps, eval_steps=args.eval_steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate, strategy=args.strategy,
        data_service=args.data_service,
        trainer_workers=getattr(args, "trainer_workers", 1),
        trainer_job_timeout=getattr(args, "trainer_job_timeout", PipelineConfig.trainer_job_timeout),
        tune_workers=getattr(args, "tune_workers", 1),
        tune_job_timeout=getattr(args, "tune_job_timeout", PipelineConfig.tune_job_timeout),
        seed=args.seed, xla=args.xla, profile=args.profile,
        min_accuracy=args.min_accuracy, max_regression=args.max_regression, gate_margin=args.gate_margin,
        base_model=getattr(args, "base_model", None),
        warm_start=getattr(args, "warm_start", False),
        beam_mode=args.beam_mode, beam_workers=args.beam_workers, beam_args=list(args.beam_arg),
        transform_statistics=args.transform_statistics,
        enable_cache=not args.no_cache, schema_file=getattr(args, "schema", None),
        ingest=args.ingest, span_pattern=args.span_pattern, spans=args.spans,
        tune_trials=args.tune_trials, tune_steps=args.tune_steps, tune_budget=args.tune_budget,
        tune_algorithm=args.tune_algorithm, hyperparameters_file=args.hyperparameters,
    )


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

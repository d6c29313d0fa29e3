"""Command line: ``python -m pipeline {run,predict} ...``.

Heavy imports (TFX, TensorFlow) happen inside the commands, so ``--help`` is instant.
Errors a user can fix are printed as one paragraph with a non-zero exit; the full
traceback of an unexpected failure goes to a log file whose path is printed.
"""
import argparse
import logging
import os
import sys
import time
import traceback
from typing import List, Optional

import stackenv  # noqa: F401  (before anything imports TensorFlow)
from pipeline.config import BEAM_MODES, MODEL_FAMILIES, PipelineConfig

log = logging.getLogger("pipeline")
EXIT_USER_ERROR = 2
EXIT_PIPELINE_FAILED = 1
EXIT_INTERRUPTED = 130


class UserError(Exception):
    """A problem the user can fix; its message is the whole report."""


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        force=True)
    # TFX/Beam/TF log every step at INFO, harmless deprecations at WARNING, and a failing
    # component's traceback at ERROR. Without -v the run reports failures itself (one
    # paragraph, traceback saved to output/logs/), so their logs stay quiet.
    noisy_level = logging.INFO if verbose else logging.CRITICAL
    logging.getLogger().setLevel(noisy_level)
    for name in ("pipeline", "data", "models", "components"):
        logging.getLogger(name).setLevel(logging.INFO)
    try:
        from absl import logging as absl_logging

        absl_logging.set_verbosity(absl_logging.INFO if verbose else absl_logging.FATAL)
    except ImportError:
        pass


DATA_HELP = ("cnn: a folder with one sub-folder of PNG/JPEG images per class, a CIFAR-10 'python "
             "version' folder, or TFRecords in this project's feature spec (default: scikit-learn's "
             "bundled 8x8 digits). seq2seq: a UTF-8 .txt file or a folder of them, one document per "
             "file (default: the Python Language Reference prose shipped with CPython)")
OUTPUT_HELP = ("output directory: pipeline root, MLMD, prepared data and serving/<model>/<version> "
               "(default: %(default)s)")


def _add_data_arguments(parser: argparse.ArgumentParser, data_help: str = DATA_HELP) -> None:
    defaults = PipelineConfig.__dataclass_fields__
    parser.add_argument("--model", choices=MODEL_FAMILIES, default="cnn",
                        help="model family: cnn (image classifier) or seq2seq (text continuation)")
    parser.add_argument("--data", default=None, help=data_help)
    parser.add_argument("--context-words", type=int, default=defaults["context_words"].default,
                        help="seq2seq: words of context per example (default: %(default)s)")
    parser.add_argument("--target-words", type=int, default=defaults["target_words"].default,
                        help="seq2seq: words to continue per example (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=defaults["vocab_size"].default,
                        help="seq2seq: tokens kept in the vocabulary (default: %(default)s)")
    parser.add_argument("--image-size", type=int, default=None,
                        help="resize images to N x N (default: native; folders 32)")
    parser.add_argument("--channels", type=int, choices=(1, 3), default=None,
                        help="1 = grayscale, 3 = RGB (default: native)")


def _add_pipeline_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = PipelineConfig.__dataclass_fields__
    d = lambda name: defaults[name].default  # noqa: E731
    steps = parser.add_mutually_exclusive_group()
    steps.add_argument("--epochs", type=int, default=None,
                       help="passes over the training split (default: cnn 15, seq2seq 6)")
    steps.add_argument("--train-steps", type=int, default=None, help="total training steps (overrides --epochs)")
    parser.add_argument("--eval-steps", type=int, default=None, help="validation steps during training "
                        "(default: one pass over the eval split)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size per replica (default: 64)")
    parser.add_argument("--learning-rate", type=float, default=None,
                        help="Adam learning rate (default: cnn 0.001, seq2seq 0.003)")
    parser.add_argument("--strategy", choices=("mirrored", "multi_worker", "default"), default=d("strategy"),
                        help="tf.distribute strategy (multi_worker reads TF_CONFIG) (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=d("seed"))
    parser.add_argument("--xla", action="store_true", help="compile the train step with XLA (jit_compile)")
    parser.add_argument("--profile", default=None, metavar="START,END",
                        help="write a TensorBoard profiler trace of training batches START..END into the "
                        "Trainer's model_run dir (view: tensorboard --logdir <it>, Profile tab)")
    parser.add_argument("--min-accuracy", type=float, default=None,
                        help="bless only if the overall key metric (cnn: accuracy, seq2seq: top-5 "
                        "next-word accuracy) >= this, on top of --gate-margin (default: cnn 0, seq2seq 0.36, about the bigram reference)")
    parser.add_argument("--gate-margin", type=float, default=d("gate_margin"),
                        help="bless only if the key metric beats the family's reference predictor "
                        "(cnn: logistic regression) by this much (absolute; negative: may trail it; "
                        "default: %(default)s)")
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
                        help="let Transform compute pre-/post-transform statistics for TFDV (~5 s more "
                        "per run; off by default since StatisticsGen already describes the input)")
    parser.add_argument("--beam-workers", type=int, default=os.cpu_count() or 1,
                        help="multi_processing workers (default: CPU count, %(default)s)")
    parser.add_argument("--beam-arg", action="append", default=[], metavar="ARG",
                        help="extra Beam pipeline arg, repeatable, e.g. --beam-arg=--runner=FlinkRunner")
    parser.add_argument("--no-cache", action="store_true", help="re-run every component")
    parser.add_argument("--pipeline-name", default=None, help="default: <model>-pipeline")
    parser.add_argument("--serving-name", default=None, help="model name in the serving dir (default: --model)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=(
        "TFX pipeline: ExampleGen -> StatisticsGen -> SchemaGen -> ExampleValidator -> "
        "Transform -> Trainer -> Evaluator -> Pusher, run locally on Apache Beam."))
    parser.add_argument("-v", "--verbose", action="store_true", help="show TFX/Beam/TF logs")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="prepare data and run the pipeline locally",
                              description="Prepare the data, run the pipeline on Apache Beam, print a summary.")
    _add_data_arguments(run)
    run.add_argument("--output", default="output", help=OUTPUT_HELP)
    run.add_argument("--accept-schema-change", action="store_true",
                     help="the data changed on purpose: re-infer the schema from it (instead of validating "
                     "against the pinned one) and pin the new one after the run")
    run.add_argument("--runner", choices=("beam",), default="beam",
                     help="local orchestrator; components run on Apache Beam (default: %(default)s). "
                     "For Kubeflow use `compile` and `deploy`.")
    _add_pipeline_arguments(run)

    prepare = commands.add_parser("prepare", help="only convert a data source to TFRecords",
                                  description="Convert a data source to the TFRecords the pipeline reads and "
                                  "print their directory (e.g. to upload it for Kubeflow).")
    _add_data_arguments(prepare)
    prepare.add_argument("--output", default="output", help=OUTPUT_HELP)

    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines (KFP v2)",
                                   description="Compile the same pipeline graph to a KFP v2 PipelineSpec YAML "
                                   "that `deploy` (or kfp.Client().upload_pipeline) uploads.")
    _add_data_arguments(compile_, data_help=(
        "a PREPARED dataset directory (holding manifest.json), local or an object-store URI "
        "readable by the cluster; see `prepare` (default: the bundled data baked into the image)"))
    compile_.add_argument("--image", required=True, help="pipeline image (built from kubeflow/Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="object-store URI for all outputs, e.g. "
                          "gs://bucket/tfx (pipeline root, serving/<model>/<version>)")
    compile_.add_argument("--output", dest="package", default=None,
                          help="package path (default: kubeflow/<pipeline-name>.yaml)")
    compile_.add_argument("--schema", default=None, help="curated schema.pbtxt URI to validate data against "
                          "(e.g. the one `run` pinned under output/schema/); default: infer it every run")
    _add_pipeline_arguments(compile_)

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
    generate.add_argument("--max-tokens", type=int, default=20, help="new tokens at most (default: %(default)s, "
                          "capped at 64 by the model)")
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
    deploy_.add_argument("--package", required=True, help="compiled pipeline YAML")
    deploy_.add_argument("--pipeline-name", default=None, help="default: the package's pipelineInfo.name")
    deploy_.add_argument("--experiment", default="Default",
                         help="experiment for --run, created if missing (default: %(default)s)")
    deploy_.add_argument("--run", action="store_true", help="start a run of the uploaded version")
    deploy_.add_argument("--namespace", default=None,
                         help="Kubeflow profile namespace (needed with --run on multi-user Kubeflow)")
    deploy_.add_argument("--run-name", default=None, help="default: '<pipeline name> <UTC time>'")

    report = commands.add_parser("report", help="write an HTML report of the latest evaluation", description=(
        "Find the latest evaluation of a run through ML Metadata and write a self-contained HTML report "
        "(metrics per slice, candidate vs baseline, validation, per-family pictures) and its metrics as JSON."))
    report.add_argument("--output", default="output", help="output directory of a run (default: %(default)s)")
    report.add_argument("--to", default=None, help="HTML file to write (default: <output>/report.html); "
                        "the metrics go beside it as <name>.json")
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
    return parser


def config_from_args(args: argparse.Namespace) -> PipelineConfig:
    output_dir = getattr(args, "pipeline_root", None) or args.output
    data = dict(model=args.model, data=args.data, output_dir=output_dir, image_size=args.image_size,
                channels=args.channels, context_words=args.context_words, target_words=args.target_words,
                vocab_size=args.vocab_size)
    if not hasattr(args, "epochs"):  # `prepare`: data settings only
        return PipelineConfig(**data)
    return PipelineConfig(
        **data,
        pipeline_name=args.pipeline_name, serving_model_name=args.serving_name,
        epochs=args.epochs, train_steps=args.train_steps, eval_steps=args.eval_steps,
        batch_size=args.batch_size, learning_rate=args.learning_rate, strategy=args.strategy,
        seed=args.seed, xla=args.xla, profile=args.profile,
        min_accuracy=args.min_accuracy, max_regression=args.max_regression, gate_margin=args.gate_margin,
        base_model=getattr(args, "base_model", None),
        beam_mode=args.beam_mode, beam_workers=args.beam_workers, beam_args=list(args.beam_arg),
        transform_statistics=args.transform_statistics,
        enable_cache=not args.no_cache, schema_file=getattr(args, "schema", None),
    )


def _failure_report(error: BaseException, config: PipelineConfig) -> str:
    """One paragraph: which component failed, the root cause, where the full log is."""
    os.makedirs(config.logs_dir, exist_ok=True)
    log_path = os.path.join(config.logs_dir, f"error-{time.strftime('%Y%m%d-%H%M%S')}.log")
    with open(log_path, "w") as handle:
        traceback.print_exception(type(error), error, error.__traceback__, file=handle)
    from pipeline.local_runner import ComponentFailed

    from components.validator import DataAnomaliesError

    failed = _find_cause(error, ComponentFailed)
    root = _root_cause(failed.cause if failed else error)
    where = f"Component {failed.node_id} failed" if failed else "The pipeline failed"
    text = str(root).strip()
    # Our own errors are written for the user in full; others: their last line is the gist.
    message = text if isinstance(root, DataAnomaliesError) else (text.splitlines() or [""])[-1]
    return (f"{where}: {type(root).__name__}: {message}\n"
            f"Full traceback: {log_path} (re-run with -v for TFX/Beam logs).")


def _find_cause(error: BaseException, kind):
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, kind):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _is_interrupt(error: BaseException) -> bool:
    if _find_cause(error, KeyboardInterrupt) is not None:
        return True
    return str(error).startswith("KeyboardInterrupt")


def _root_cause(error: BaseException) -> BaseException:
    while error.__cause__ is not None:
        error = error.__cause__
    return error


def _config(args: argparse.Namespace) -> PipelineConfig:
    try:
        return config_from_args(args)
    except ValueError as error:
        raise UserError(str(error)) from error


def _prepare(config: PipelineConfig):
    from data.errors import DataError
    from pipeline.families import get_family

    try:
        dataset = get_family(config.model).prepare_data(config)
    except DataError as error:
        raise UserError(str(error)) from error
    log.info("Data: %d examples (%s)", dataset.num_examples, dataset.examples_dir)
    return dataset


def command_prepare(args: argparse.Namespace) -> int:
    print(_prepare(_config(args)).examples_dir)
    return 0


def command_compile(args: argparse.Namespace) -> int:
    config = _config(args)
    from pipeline.kubeflow_runner import compile_pipeline, dataset_for_cluster

    try:
        dataset = dataset_for_cluster(config, _prepare)
    except FileNotFoundError as error:
        raise UserError(str(error)) from error
    package = compile_pipeline(config, dataset, args.image, args.package)
    print(package)
    log.info("Compiled %s for image %s, pipeline root %s, data %s. Deploy: python -m pipeline deploy "
             "--host URL --package %s --run", config.pipeline_name, args.image, config.pipeline_root,
             dataset.examples_dir, package)
    return 0


def command_run(args: argparse.Namespace) -> int:
    from pipeline.run_lock import OutputDirBusy, exclusive_run

    config = _config(args)
    try:
        with exclusive_run(config.output_dir):
            return _run_locked(args, config)
    except OutputDirBusy as error:
        raise UserError(str(error)) from error


def _run_locked(args: argparse.Namespace, config: PipelineConfig) -> int:
    started = time.monotonic()
    log.info("Pipeline %s: model=%s, output=%s", config.pipeline_name, config.model, config.output_dir)

    from pipeline import schema_pin
    from pipeline import summary as run_summary

    if not args.accept_schema_change:
        config.schema_file = schema_pin.pinned_schema(config)
    log.info("Schema: %s", f"validating against the pinned {config.schema_file}" if config.schema_file
             else "inferred from this data")
    dataset = _prepare(config)

    from pipeline.local_runner import run_local

    try:
        run_local(config, dataset)
    except KeyboardInterrupt:
        raise
    except Exception as error:  # noqa: BLE001 - reported in one paragraph, traceback to a file
        if _is_interrupt(error):  # Beam re-raises Ctrl-C inside a component as RuntimeError
            raise KeyboardInterrupt from None
        print(_failure_report(error, config), file=sys.stderr)
        return EXIT_PIPELINE_FAILED
    result = run_summary.collect(config, dataset)
    if config.schema_file is None:
        _pin_inferred_schema(config, result)
    print(run_summary.format_summary(result, config, time.monotonic() - started))
    run_summary.check_record_counts(result)
    return 0


def _pin_inferred_schema(config: PipelineConfig, result) -> None:
    from pipeline import graph, schema_pin
    from pipeline.families import get_family

    schema_gen = next((c for c in result.components if c.node_id == graph.SCHEMA_GEN), None)
    if schema_gen and schema_gen.outputs.get("schema"):
        path = schema_pin.pin_schema(config, schema_gen.outputs["schema"][0].uri,
                                     get_family(config.model).curate_schema)
        log.info("Schema pinned: %s. Later runs validate new data against it "
                 "(--accept-schema-change re-infers it).", path)


def command_predict(args: argparse.Namespace) -> int:
    from data.errors import DataError
    from pipeline.predict import predict_files

    try:
        for line in predict_files(args.model_dir, args.images):
            print(line)
    except (DataError, FileNotFoundError) as error:
        raise UserError(str(error)) from error
    return 0


def command_generate(args: argparse.Namespace) -> int:
    from pipeline.predict import generate_text

    if args.max_tokens < 1 or args.top_k < 0 or args.temperature <= 0:
        raise UserError("--max-tokens must be >= 1, --top-k >= 0 and --temperature > 0.")
    try:
        for prompt, continuation in zip(args.prompts, generate_text(
                args.model_dir, args.prompts, args.max_tokens, args.top_k, args.temperature)):
            print(f"{prompt} -> {continuation}")
    except FileNotFoundError as error:
        raise UserError(str(error)) from error
    return 0


def command_deploy(args: argparse.Namespace) -> int:
    from pipeline.kubeflow_deploy import DeployError, deploy

    try:
        result = deploy(args.host, args.package, pipeline_name=args.pipeline_name, experiment=args.experiment,
                        run=args.run, namespace=args.namespace, run_name=args.run_name)
    except DeployError as error:
        raise UserError(str(error)) from error
    print(result.summary())
    return 0


def command_report(args: argparse.Namespace) -> int:
    from pipeline.report import ReportError, write_report

    to_path = args.to or os.path.join(args.output, "report.html")
    try:
        path = write_report(args.output, to_path, args.pipeline_name)
    except (FileNotFoundError, ReportError) as error:
        raise UserError(str(error)) from error
    print(f"Report: {path}\nMetrics: {os.path.splitext(path)[0]}.json")
    return 0


def command_models(args: argparse.Namespace) -> int:
    from pipeline.serving_commands import list_models

    try:
        print("\n".join(list_models(args.serving_dir)))
    except FileNotFoundError as error:
        raise UserError(str(error)) from error
    return 0


def command_rollback(args: argparse.Namespace) -> int:
    from pipeline.serving_commands import rollback

    try:
        print(rollback(args.serving_dir))
    except (FileNotFoundError, ValueError) as error:
        raise UserError(str(error)) from error
    return 0


COMMANDS = {"run": command_run, "prepare": command_prepare, "compile": command_compile, "deploy": command_deploy,
            "predict": command_predict, "generate": command_generate, "report": command_report,
            "models": command_models, "rollback": command_rollback}


def exit_process(code: int) -> None:
    """End the process without tearing down TensorFlow, Beam and TFX module state.

    After a run, a normal interpreter exit spends 2-5 s finalizing those modules
    (benchmarks/README.md); every result is on disk by then, so flush and leave.
    """
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def entry_point() -> None:
    """``tfx-project`` console script and ``python -m pipeline``."""
    exit_process(main())


def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not args.verbose:
        # TF's C++ start-up prints harmless "Unable to register cuDNN factory" errors.
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    _configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except UserError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("\nInterrupted. Completed components are cached in MLMD; run the same command "
              "again to resume from them.", file=sys.stderr)
        return EXIT_INTERRUPTED

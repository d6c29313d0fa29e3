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
from pipeline.arguments import build_parser, config_from_args  # noqa: F401  (re-exported)
from pipeline.config import PipelineConfig

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

"""Command line: ``python -m pipeline {run,predict,report,tensorboard,...} ...``.

Heavy imports (TFX, TensorFlow) happen inside the commands, so ``--help`` is instant.
There is one error path, in ``main``: a :class:`~stackenv.errors.ProjectError` (raised
anywhere, also inside a component's executor) is printed as its paragraph with its exit
code; an OS error on a path becomes a paragraph naming the path; anything else prints its
first line and the path of a log file holding the full traceback (``pipeline/failures.py``
writes that paragraph). Commands never catch.
"""
import argparse
import contextlib
import logging
import math
import os
import re
import signal
import sys
import time

import stackenv  # noqa: F401  (before anything imports TensorFlow)
from stackenv import compat, text_out
from stackenv.errors import EXIT_USER_ERROR, ConfigError, ProjectError

from artifacts.write_targets import check_write_target
from pipeline.arguments import (  # noqa: F401
    build_parser,
    check_library_paths,
    config_from_args,
    parse_args,
    step_settings_from_args,
)
from pipeline.config import PipelineConfig
from pipeline.failures import failure_report, is_interrupt, logs_dir
from pipeline.kubeflow.deploy_settings import DeploySettings, LoginSettings
from pipeline.settings import from_args

log = logging.getLogger("pipeline")
EXIT_INTERRUPTED = 130
SENTENCE_END = [".", "?", "!"]  # generate --sentence: the tokens that end one


class _CurrentStderrHandler(logging.StreamHandler):
    """Writes to whatever sys.stderr is when a record is emitted, not when logging was configured.

    The commands also run in-process (a notebook, the KFP step's `main`, a caller that redirects
    stderr for a while): a handler bound to the stream of that moment would later write to a closed
    or forgotten file, and every warning would become a "--- Logging error ---" traceback.
    """

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


def _configure_logging(verbose: bool) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S",
                        handlers=[_CurrentStderrHandler()], force=True)
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


def _prepare(config: PipelineConfig):
    from pipeline.families import get_family

    dataset = get_family(config.model).prepare_data(config)
    log.info("Data: %d examples (%s)", dataset.num_examples, dataset.examples_dir)
    return dataset


def command_prepare(args: argparse.Namespace) -> int:
    print(_prepare(config_from_args(args)).examples_dir)
    return 0


def command_compile(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    from pipeline.kubeflow.backend_version import TESTED_VERSIONS, untested_warning
    from pipeline.kubeflow.compile import (
        check_backend_options,
        compile_pipeline,
        dataset_for_cluster,
        default_package_path,
        kfp_pipeline_root,
        readable_paths,
    )
    from pipeline.kubeflow.compile_settings import CompileTarget
    from pipeline.kubeflow.k8s_grammar import check_image, check_kfp_pipeline_name
    from pipeline.kubeflow.storage import check_cluster_input, check_pipeline_root, check_s3_root

    target = from_args(args, CompileTarget)
    check_image(target.image)  # every string the package carries is checked before anything is prepared or written
    check_kfp_pipeline_name(config.pipeline_name)
    check_pipeline_root(target.pipeline_root, "compile --pipeline-root")
    settings = step_settings_from_args(args)
    check_s3_root(target.pipeline_root, settings.s3_endpoint, "compile --pipeline-root")
    check_cluster_input(config.data, "--data", "compile")  # a local folder compiles, then fails in the pod
    check_cluster_input(config.score_dir, "--score", "compile")
    check_backend_options(target.retries, target.kfp_version)
    package_path = target.package or default_package_path(config)
    check_write_target(package_path, "--output", {"--data": config.data, "--score": config.score_dir})
    replaces = os.path.isfile(package_path)
    untested = untested_warning(target.kfp_version, "--kfp-version")
    if untested:
        log.warning("%s", untested)
    dataset = dataset_for_cluster(readable_paths(config), _prepare)
    package = compile_pipeline(config, dataset, target.image, package_path, settings, retries=target.retries,
                               kfp_version=target.kfp_version)
    if replaces:
        log.warning("Replaced the existing %s with this compilation (compile --output names another file to keep "
                    "both).", package)
    print(package)
    if target.pipeline_root.startswith("s3://"):
        from pipeline.kubeflow.launcher_config import write_launcher_configmap

        manifest = write_launcher_configmap(package, kfp_pipeline_root(config), settings.s3_endpoint,
                                            settings.s3_secret or "S3-SECRET-NAME")
        log.info("KFP's launcher opens this s3:// root only with the providers entry in %s: apply it in the "
                 "runs' namespace once (kubeflow/README.md, 'An s3:// root on another endpoint').", manifest)
    data = dataset.examples_dir if dataset else config.data or "the family's bundled default set, inside the image"
    log.info("Compiled %s for image %s and KFP backend %s (tested: %s); data: %s; each run writes its artifacts "
             "under %s/<pipeline>/<run id>/ and pushes models to %s/. Deploy: python -m pipeline deploy --host URL "
             "--package %s --run", config.pipeline_name, target.image, target.kfp_version, ", ".join(TESTED_VERSIONS),
             data, kfp_pipeline_root(config), readable_paths(config).serving_model_dir, package)
    return 0


def command_tfjob(args: argparse.Namespace) -> int:
    from pipeline.kubeflow.training.tfjob import TFJobSettings, tfjob_manifest, trainer_job, write_manifest

    settings = from_args(args, TFJobSettings)
    settings.check()  # before the data is prepared
    check_write_target(args.to, "--to", {"--data": args.data})
    config = config_from_args(args)
    path = write_manifest(tfjob_manifest(trainer_job(config, _prepare(config), settings), settings), args.to)
    print(path)
    log.info("TFJob %s: 1 chief + %d worker(s) of %s. Start: kubectl apply -f %s; follow: kubectl get tfjob %s -n %s",
             settings.name, settings.workers - 1, settings.image, path, settings.name, settings.namespace)
    return 0


def command_run(args: argparse.Namespace) -> int:
    from pipeline.local.preflight import check_run
    from pipeline.local.run_lock import exclusive_run
    from pipeline.local.run_temp import private_temp_dir

    config = config_from_args(args)
    check_run(config)  # scale-out settings (TF_CONFIG, worker pool, dispatcher) before anything runs
    with exclusive_run(config.output_dir), private_temp_dir():
        return _run_locked(args, config)


def _run_locked(args: argparse.Namespace, config: PipelineConfig) -> int:
    started = time.monotonic()
    log.info("Pipeline %s: model=%s, output=%s", config.pipeline_name, config.model, config.output_dir)

    from pipeline.local import schema_pin
    from pipeline.results import summary as run_summary

    if not args.accept_schema_change:
        config.schema_file = schema_pin.pinned_schema(config)
    log.info("Schema: %s", f"validating against the pinned {config.schema_file}" if config.schema_file
             else "inferred from this data")
    # example-gen: the pipeline reads the data itself; its facts come back from the run.
    dataset = None if config.ingests_in_pipeline() else _prepare(config)

    from pipeline.local.runner import ingested_dataset, run_local

    run_local(config, dataset)  # a failure is reported by main(): one paragraph, traceback to a file
    result = run_summary.collect(config, dataset or ingested_dataset(config))
    if config.schema_file is None:
        _pin_inferred_schema(config, result)
    print(run_summary.format_summary(result, config, time.monotonic() - started))
    run_summary.check_record_counts(result)
    run_summary.check_scoring(result)  # after the summary: it says where the rest were scored
    return 0


def _pin_inferred_schema(config: PipelineConfig, result) -> None:
    from pipeline import graph
    from pipeline.families import get_family
    from pipeline.local import schema_pin

    schema_gen = next((c for c in result.components if c.node_id == graph.SCHEMA_GEN), None)
    if schema_gen and schema_gen.outputs.get("schema"):
        path = schema_pin.pin_schema(config, schema_gen.outputs["schema"][0].uri,
                                     get_family(config.model).curate_schema)
        log.info("Schema pinned: %s. Later runs validate new data against it "
                 "(--accept-schema-change re-infers it).", path)


def command_predict(args: argparse.Namespace) -> int:
    if args.quantization and not args.tflite:
        raise ConfigError("--quantization", f"chooses a TFLite model, so it needs --tflite (got --quantization "
                                            f"{args.quantization} alone); add --tflite, or leave --quantization "
                                            "out to use the SavedModel.")
    from pipeline.kubeflow.storage import register_filesystems
    from pipeline.predict import predict_files

    register_filesystems(args.model_dir)  # a model on an s3:// serving base (a Kubeflow run's)
    tflite = (args.quantization or "float16") if args.tflite else None
    for line in predict_files(args.model_dir, args.images, tflite=tflite):
        print(line)
    return 0


def command_generate(args: argparse.Namespace) -> int:
    for flag, valid, rule in (("--max-tokens", args.max_tokens >= 1, ">= 1"), ("--top-k", args.top_k >= 1,
                                                                                ">= 1 (1 = greedy)"),
                              ("--temperature", math.isfinite(args.temperature) and args.temperature > 0,
                               "a finite number > 0 (1.0 samples as trained, lower is more conservative)"),
                              ("--top-p", 0 < args.top_p <= 1, "a number in (0, 1], e.g. 0.9"),
                              ("--repetition-penalty", math.isfinite(args.repetition_penalty)
                               and args.repetition_penalty >= 1, "a finite number >= 1 (1 = off), e.g. 1.2"),
                              ("--no-repeat-ngram", args.no_repeat_ngram >= 0, ">= 0 (0 = off), e.g. 3")):
        if not valid:
            raise ConfigError(flag, f"must be {rule}, got {getattr(args, flag[2:].replace('-', '_'))}.")
    empty = [i + 1 for i, prompt in enumerate(args.prompts) if not prompt.strip()]
    if empty:
        raise ConfigError("generate PROMPT", f"prompt {empty[0]} of {len(args.prompts)} is empty; the model "
                                             "continues text, so give it at least one word, e.g. generate "
                                             "--model-dir DIR 'the list'.")
    from pipeline.kubeflow.storage import register_filesystems
    from pipeline.predict import generate_scored  # TensorFlow loads only once the options are valid

    register_filesystems(args.model_dir)

    stop_at = " ".join(dict.fromkeys(args.stop_at.split() + (SENTENCE_END if args.sentence else [])))
    for prompt, (continuation, given) in zip(args.prompts, generate_scored(
            args.model_dir, args.prompts, args.max_tokens, args.top_k, args.temperature, stop_at,
            with_scores=args.show_scores, top_p=args.top_p, repetition_penalty=args.repetition_penalty,
            no_repeat_ngram=args.no_repeat_ngram, seed=args.seed)):
        if given is None:
            print(f"{terminal_text(prompt)} -> {terminal_text(continuation)}")
            continue
        scored = " ".join(f"{token} ({p:.2f})" for token, p in zip(continuation.split(), given))
        mean = math.exp(sum(math.log(max(p, 1e-12)) for p in given) / len(given)) if given else float("nan")
        print(f"{terminal_text(prompt)} -> {terminal_text(scored)}  [geometric mean {mean:.3f}]")
    return 0


#: A terminal's escape sequences (CSI ``ESC [ ... final``, OSC ``ESC ] ... BEL|ST``, two-byte ``ESC x``) and
#: the other control characters a terminal acts on (C0 but tab, DEL, C1).
_TERMINAL_CONTROL = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
                               r"|[\x00-\x08\x0a-\x1f\x7f-\x9f]")


def terminal_text(text: str) -> str:
    """``text`` as a terminal shows it literally: escape sequences dropped, other control characters (a line
    break included) as spaces, so an echoed prompt cannot recolour, retitle or clear the user's terminal."""
    return _TERMINAL_CONTROL.sub(lambda m: "" if m.group().startswith("\x1b") else " ", text)


def command_deploy(args: argparse.Namespace) -> int:
    from pipeline.kubeflow.k8s_grammar import check_dns_label, check_dns_subdomain

    request, login = from_args(args, DeploySettings), from_args(args, LoginSettings)
    # The Kubernetes names deploy passes to the cluster, checked before logging in.
    if request.namespace is not None:
        check_dns_label(request.namespace, "--namespace", "namespace")
    if request.service_account is not None:
        check_dns_subdomain(request.service_account, "--service-account", "service account")
    if request.list_schedules or request.delete_schedule:
        return _schedules(request, login)
    if not request.package:
        raise ConfigError("--package", "is required to deploy: pass the pipeline YAML that `python -m pipeline "
                                       "compile` wrote (or use --list-schedules / --delete-schedule ID).")
    from pipeline.kubeflow.connection import normalize_host
    from pipeline.kubeflow.deploy import deploy
    from pipeline.kubeflow.login import credentials

    result = deploy(request.host, request.package, pipeline_name=request.pipeline_name,
                    experiment=request.experiment, credentials=credentials(normalize_host(request.host), login),
                    run=request.run, namespace=request.namespace, run_name=request.run_name,
                    pipeline_root=request.pipeline_root, service_account=request.service_account,
                    enable_caching=None if request.cache is None else request.cache == "on",
                    wait_timeout=request.wait_timeout if request.wait else None, schedule=request.schedule,
                    cluster_checks=not request.skip_cluster_checks, parameters=request.param,
                    api_timeout=request.api_timeout)
    if not (request.wait and result.run_id):  # --wait printed it before following the run
        print(result.summary())
    return 0


def _schedules(request: DeploySettings, login: LoginSettings) -> int:
    from pipeline.kubeflow.connection import check_health, normalize_host
    from pipeline.kubeflow.deploy import connect
    from pipeline.kubeflow.login import credentials
    from pipeline.kubeflow.schedule import delete_schedule, list_schedules

    host = normalize_host(request.host)
    creds = credentials(host, login)
    check_health(host, timeout=10.0, token=creds.token, cookies=creds.cookies, verify=creds.verify)
    client = connect(host, namespace=request.namespace, token=creds.token, cookies=creds.cookies,
                     verify=creds.verify, api_timeout=request.api_timeout)
    if request.delete_schedule:
        print(delete_schedule(client, host, request.delete_schedule))
    else:
        print("\n".join(list_schedules(client, host, request.namespace)))
    return 0


def command_report(args: argparse.Namespace) -> int:
    from pipeline.report import write_report

    to_path = args.to or os.path.join(args.output, "report.html")
    for target in (to_path, os.path.splitext(to_path)[0] + ".json"):  # the metrics go beside the page
        check_write_target(target, "--to")
    path = write_report(args.output, to_path, args.pipeline_name)
    from pipeline.report.runs import shown_run

    run = shown_run(args.output, args.pipeline_name)
    shown = run.describe(os.path.join(args.output, "logs"))
    print(f"Report: {path}\nMetrics: {os.path.splitext(path)[0]}.json\n{shown}")
    if args.require_latest and not run.is_latest:
        from pipeline.report.evaluations import ReportError

        raise ReportError(f"--require-latest: the report in {path} is not of the latest run ({run.latest}"
                          f"{' failed in ' + ', '.join(run.latest_failed) if run.latest_failed else ''}). "
                          "Fix the failure and run the pipeline again, or leave out --require-latest.")
    return 0


def command_models(args: argparse.Namespace) -> int:
    from pipeline.kubeflow.storage import register_filesystems
    from pipeline.serving_commands import list_models

    register_filesystems(args.serving_dir)  # an s3:// serving base (a Kubeflow run's) needs tensorflow-io
    print("\n".join(list_models(args.serving_dir)))
    return 0


def command_rollback(args: argparse.Namespace) -> int:
    from pipeline.kubeflow.storage import register_filesystems
    from pipeline.local.run_lock import serving_dir_lock
    from pipeline.serving_commands import rollback

    register_filesystems(args.serving_dir)
    with serving_dir_lock(args.serving_dir):  # the run's lock: never between a run's baseline and its push
        print(rollback(args.serving_dir))
    return 0


def command_beam_pool(args: argparse.Namespace) -> int:
    from pipeline.local.beam_pool import serve

    serve(args.port)  # replaces this process
    return 0


def command_tensorboard(args: argparse.Namespace) -> int:
    from pipeline.tensorboard import check_bindable, latest_trainer_logs, serve

    if not 0 <= args.port <= 65535:
        raise ConfigError("--port", f"must be a TCP port 0-65535 (0: any free one), got {args.port}.")
    check_bindable(args.host, args.port)  # before the run is looked up: TensorBoard would print a bare OS error
    logs = latest_trainer_logs(args.output, args.pipeline_name)
    try:
        serve(logs, args.port, args.host)
    except KeyboardInterrupt:
        print("\nTensorBoard stopped.", file=sys.stderr)
    return 0


COMMANDS = {"run": command_run, "beam-pool": command_beam_pool, "tensorboard": command_tensorboard,
            "prepare": command_prepare, "compile": command_compile, "tfjob": command_tfjob, "deploy": command_deploy,
            "predict": command_predict, "generate": command_generate, "report": command_report,
            "models": command_models, "rollback": command_rollback}


def exit_process(code: int) -> None:
    """End the process without tearing down TensorFlow, Beam and TFX module state.

    After a run, a normal interpreter exit spends seconds finalizing those modules (the cost
    is measured in benchmarks/README.md); every result is on disk by then, so flush and leave.
    """
    logging.shutdown()
    compat.remove_autograph_sources()  # their atexit handler will not run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the reader left (`models | head -1`): what it wanted was written
            _stdout_to_devnull()
    os._exit(code)


def _stdout_to_devnull() -> None:
    """After the reader of stdout closed the pipe: nothing more can reach it, so the rest goes nowhere."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def entry_point() -> None:
    """``tfx-project`` console script and ``python -m pipeline``."""
    exit_process(main())


def main(argv: list[str] | None = None) -> int:
    text_out.guard_standard_streams()  # a file name that is not UTF-8 prints as \xNN, never a traceback
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        check_library_paths(args)
    except ProjectError as error:  # a --config file's mistake, before anything runs
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USER_ERROR
    from pipeline import quiet

    # Library noise written by C++ straight to fd 2 goes to <output>/logs/ (pipeline/quiet.py), unless --output
    # and --data/--score contain each other: the command refuses that before it writes anything (config.py).
    output = getattr(args, "output", None)
    if output and not _beside_inputs(args, output):
        output = None
    with quiet.unless_verbose(args.verbose, output), _command_line_hidden_from_absl():
        return _dispatch(args)


def _beside_inputs(args: argparse.Namespace, output: str) -> bool:
    """False when --output and --data/--score contain each other (the command's own check says so)."""
    from pipeline.config import check_inputs_beside_output

    try:
        check_inputs_beside_output(output, getattr(args, "data", None), getattr(args, "score_dir", None))
    except ConfigError:
        return False
    return True


@contextlib.contextmanager
def _command_line_hidden_from_absl():
    """TFX's Beam executors parse ``sys.argv`` as absl flags (BaseBeamExecutor.__init__:
    ``flags.FLAGS(sys.argv + beam_pipeline_args, known_only=True)``), so this CLI's ``-v run``
    would be read as absl's ``-v``/``--verbosity`` with the value "run" and fail every Beam
    component. The command line is already parsed; libraries see only the program name."""
    saved = sys.argv
    sys.argv = sys.argv[:1]
    try:
        yield
    finally:
        sys.argv = saved


def _dispatch(args: argparse.Namespace) -> int:
    if not args.verbose:
        # TF's C++ start-up prints harmless "Unable to register cuDNN factory" errors.
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    _configure_logging(args.verbose)
    try:
        return COMMANDS[args.command](args)
    except KeyboardInterrupt:
        return _interrupted()
    except BrokenPipeError:  # `models | head -1`: a closed pipe is a normal end for a listing
        _stdout_to_devnull()
        return 0
    except Exception as error:  # noqa: BLE001 - the one error path: a paragraph, the traceback to a file
        if is_interrupt(error):  # Beam re-raises Ctrl-C inside a component as RuntimeError
            return _interrupted()
        message, code = failure_report(error, logs_dir(args))
        print(message, file=sys.stderr)
        return code


def _interrupted() -> int:
    """Ctrl-C, or SIGTERM during a run (pipeline/local/run_lock.py): exit status 128 + the signal, as a shell
    reports it."""
    run_lock = sys.modules.get("pipeline.local.run_lock")
    stopped_by = run_lock.stop_signal() if run_lock is not None else None
    print(f"\n{'Stopped by ' + stopped_by if stopped_by else 'Interrupted'}. Completed components are cached "
          "in MLMD; run the same command again to resume from them.", file=sys.stderr)
    return 128 + signal.SIGTERM if stopped_by == "SIGTERM" else EXIT_INTERRUPTED

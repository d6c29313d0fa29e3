"""``tensorboard``: serve the last run's Trainer logs without knowing where TFX put them.

The Trainer writes Keras' TensorBoard logs (per-epoch scalars, and a profiler trace with
``run --profile``) into its ``model_run`` artifact; the newest one is found through ML
Metadata like the report finds its evaluation. The profile tab comes from
``tensorboard-plugin-profile`` (pinned in constraints/<stack>.txt), loaded as a TensorBoard plugin.
"""
import dataclasses
import os
import threading

from stackenv.errors import ConfigError, MissingInput

import tensorflow as tf

from pipeline import graph
from pipeline.results import mlmd

_OK_STATES = ("COMPLETE", "CACHED")
PROFILE_DIR = os.path.join("plugins", "profile")


@dataclasses.dataclass(frozen=True)
class TrainerLogs:
    pipeline_name: str
    logdir: str                 # the Trainer's model_run artifact
    run_name: str | None
    has_profile: bool


def _has_profile(logdir: str) -> bool:
    return any(PROFILE_DIR in root for root, _, _ in tf.io.gfile.walk(logdir))


def latest_trainer_logs(output_dir: str, pipeline_name: str | None = None) -> TrainerLogs:
    """The ``model_run`` dir of the newest completed (or cached) Trainer execution."""
    if not os.path.isfile(os.path.join(output_dir, "metadata.sqlite")):
        raise MissingInput(f"No pipeline run in {output_dir} (no metadata.sqlite there). Run the pipeline first "
                           f"(python -m pipeline run --output {output_dir}), or pass the --output of a run.")
    store = mlmd.open_output_store(output_dir)
    names = mlmd.pipeline_names(store)
    name = pipeline_name or mlmd.latest_pipeline(store)
    if name is None or name not in names:
        raise MissingInput(f"No pipeline {name!r} in {output_dir}; it has {names or 'none'}. "
                           "Pass --pipeline-name with one of those, or none for the one that ran last.")
    for execution in reversed(mlmd.node_executions(store, name, graph.TRAINER)):
        if mlmd.STATE_NAMES.get(execution.last_known_state) not in _OK_STATES:
            continue
        logdir = mlmd.first_uri(mlmd.artifacts_by_key(store, execution.id), "model_run")
        if logdir and tf.io.gfile.isdir(logdir):
            return TrainerLogs(name, logdir, mlmd.run_name(store, execution), _has_profile(logdir))
    raise MissingInput(f"Pipeline {name!r} in {output_dir} has no completed {graph.TRAINER} with logs yet. "
                       "Run the pipeline until the Trainer completes (see "
                       f"{os.path.join(output_dir, 'logs')}{os.sep} for failed runs).")


def start_server(logdir: str, port: int = 6006, host: str = "127.0.0.1") -> str:
    """Start TensorBoard (every installed plugin, the profiler's included) in this process; returns its URL.

    ``--load_fast false``: the Trainer's logs are small, and the fast loader announces itself
    on the terminal as experimental.
    """
    from tensorboard import program

    check_bindable(host, port)
    board = program.TensorBoard()
    board.configure(argv=[None, "--logdir", logdir, "--port", str(port), "--host", host,
                          "--reload_interval", "5", "--load_fast", "false"])
    try:
        return board.launch()
    except SystemExit:  # TensorBoard prints a bare OS message ("Cannot assign requested address") and exits
        raise ConfigError("--host", f"TensorBoard could not listen on {host}:{port}. Pass an address of this "
                          "machine (127.0.0.1, or 0.0.0.0 for every interface) and a free --port.") from None
    except program.TensorBoardServerException as error:  # port in use, host not bindable
        what = "is in use (another TensorBoard?)" if isinstance(error, program.TensorBoardPortInUseError) \
            else f"cannot be served ({getattr(error, 'msg', error)})"
        raise ConfigError("--port", f"{host}:{port} {what}. Pass another --port, or --port 0 for any free "
                                    "one.") from None


def check_bindable(host: str, port: int) -> None:
    """ConfigError naming --host or --port when this machine cannot listen there, before TensorBoard tries (it
    prints the bare OS message and exits)."""
    import errno
    import socket

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as error:
        raise ConfigError("--host", f"{host} is not an address or a host name this machine can resolve "
                          f"({getattr(error, 'strerror', None) or error}). Pass 127.0.0.1 (this machine only) or "
                          "0.0.0.0 (every interface).") from None
    family, kind, proto, _, address = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return  # TensorBoard's own "port in use" paragraph follows
            flag = "--port" if error.errno == errno.EACCES and port < 1024 else "--host"
            raise ConfigError(flag, f"this machine cannot listen on {host}:{port} ({error.strerror}): "
                              + ("ports below 1024 need root; pass e.g. --port 6006." if flag == "--port" else
                                 f"{host} is not an address of this machine. Pass 127.0.0.1 (this machine only), "
                                 "0.0.0.0 (every interface) or one of its own addresses.")) from None


def serve(logs: TrainerLogs, port: int = 6006, host: str = "127.0.0.1", stop: threading.Event | None = None) -> str:
    """Serve until ``stop`` is set (the CLI: until Ctrl-C); returns the URL it served on."""
    url = start_server(logs.logdir, port, host)
    profile = ("Profile tab: the --profile trace" if logs.has_profile
               else "no profile (run with --profile START,END to record one)")
    print(f"TensorBoard for {logs.pipeline_name} run {logs.run_name}: {url}\n"
          f"Logs: {logs.logdir}\nScalars tab: loss and metrics per epoch; {profile}. Ctrl-C stops it.", flush=True)
    (stop or threading.Event()).wait()
    return url

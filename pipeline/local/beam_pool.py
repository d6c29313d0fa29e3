"""Beam SDK worker pools: start one with this project's environment, and check one before a run.

Beam's portable mode (what Flink, Spark and Dataflow use to run Python code) hands each
bundle to SDK workers that an external *worker pool* starts
(``apache_beam.runners.worker.worker_pool_main``). Two traps, both read from Beam 2.59's
source (``runners/worker/worker_pool_main.py``, ``runners/portability/fn_api_runner/
worker_handlers.py``):

- The pool starts each worker as ``python -c ...``: whatever ``python`` is first on its
  ``PATH``, not the interpreter the pool runs in. Outside an activated virtualenv that is
  the system Python, without apache_beam or this project. :func:`serve` puts this
  interpreter's directory first on ``PATH`` and the project on ``PYTHONPATH``.
- When a worker dies at start-up, the runner waits for its control connection forever:
  Beam has no start-up timeout for ``EXTERNAL`` environments (``ExternalWorkerHandler``
  only sends ``StartWorker``). :func:`check_pool` therefore asks the pool for one probe
  worker before the run and waits, bounded, for it to connect to a control server of
  ours; a pool that cannot start a working Python worker fails the run in seconds with
  one paragraph.
- The runner gives workers its control server as ``socket.getfqdn():PORT``
  (``ExternalWorkerHandler.host_from_worker``, Beam 2.59 to 2.77). Where this machine's own
  name does not resolve (a chroot or container without the host's ``/etc/hosts``), a worker
  of a pool on this machine retries that name forever: :func:`check_pool` says so at once.
"""
from __future__ import annotations

import os
import queue
import socket
import sys
import uuid
from pathlib import Path

from stackenv.errors import ConfigError

PROJECT_ROOT = Path(__file__).resolve().parents[2]  # pipeline/local/beam_pool.py -> the project
#: How long the pool's address may take to answer, and a probe worker to connect.
CONNECT_TIMEOUT_S = 10
WORKER_START_TIMEOUT_S = 120
SETTING = "--beam-arg=--environment_config"


def pool_environment(environ=None) -> dict:
    """The environment the pool (and so every worker it starts) runs with."""
    env = dict(os.environ if environ is None else environ)
    bin_dir = os.path.dirname(sys.executable)
    env["PATH"] = os.pathsep.join([bin_dir] + [p for p in env.get("PATH", "").split(os.pathsep) if p and p != bin_dir])
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT)] + [p for p in paths if p != str(PROJECT_ROOT)])
    return env


def pool_command(port: int) -> list[str]:
    return [sys.executable, "-m", "apache_beam.runners.worker.worker_pool_main", f"--service_port={port}"]


def serve(port: int) -> None:
    """Replace this process by a worker pool on ``port`` (Ctrl-C stops it)."""
    if not 0 < port < 65536:
        raise ConfigError("--port", f"must be a TCP port between 1 and 65535, got {port}")
    print(f"Beam worker pool on port {port} with {sys.executable}; run the pipeline with "
          f"--beam-arg=--runner=PortableRunner --beam-arg=--job_endpoint=embed "
          f"--beam-arg=--environment_type=EXTERNAL --beam-arg=--environment_config=localhost:{port}",
          flush=True)
    os.execve(sys.executable, pool_command(port), pool_environment())


def external_pool_address(beam_args: list[str]) -> str | None:
    """The pool address of an ``EXTERNAL`` environment that this process's runner will use
    (``--job_endpoint=embed``), else None: with a remote job server (Flink, Spark) the pool
    is that cluster's sidecar, reachable from its task managers, not necessarily from here."""
    from apache_beam.options.pipeline_options import PipelineOptions

    # Beam's own parser, as stackenv.compat.workers_share_this_environment reads the same args.
    options = PipelineOptions(flags=list(beam_args)).get_all_options()
    if str(options.get("environment_type") or "").upper() != "EXTERNAL" or options.get("job_endpoint") != "embed":
        return None
    return options.get("environment_config") or ""


def check_pool(address: str, connect_timeout: float = CONNECT_TIMEOUT_S,
               start_timeout: float = WORKER_START_TIMEOUT_S) -> None:
    """A :class:`ConfigError` naming the setting unless the pool at ``address`` starts a worker."""
    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2, beam_fn_api_pb2_grpc, endpoints_pb2

    if not address or ":" not in address:
        raise _error(address, "is not a host:port address")
    if _on_this_machine(address.rsplit(":", 1)[0].strip("[]")):
        _check_worker_host(address)
    channel = grpc.insecure_channel(address)
    try:
        try:
            grpc.channel_ready_future(channel).result(timeout=connect_timeout)
        except grpc.FutureTimeoutError:
            raise _error(address, f"did not answer within {connect_timeout:g} s (nothing listens there, "
                                  "or a firewall drops the connection)") from None
        pool = beam_fn_api_pb2_grpc.BeamFnExternalWorkerPoolStub(channel)
        connected: queue.Queue = queue.Queue()
        server, control_url = _probe_control_server(connected)
        worker_id = f"preflight-{uuid.uuid4().hex[:8]}"
        try:
            response = pool.StartWorker(beam_fn_api_pb2.StartWorkerRequest(
                worker_id=worker_id, control_endpoint=endpoints_pb2.ApiServiceDescriptor(url=control_url)),
                timeout=connect_timeout)
            if response.error:
                raise _error(address, "refused to start a worker: " + response.error.strip().splitlines()[-1])
            try:
                connected.get(timeout=start_timeout)
            except queue.Empty:
                raise _error(address, f"accepted the request but its worker did not connect within "
                                      f"{start_timeout:g} s: the pool starts workers with the `python` first on "
                                      "its PATH, which must have apache_beam and this project installed "
                                      "(a system Python fails with ModuleNotFoundError)") from None
        except grpc.RpcError as error:
            raise _error(address, f"failed the StartWorker call ({error.code().name})") from None
        finally:
            try:
                pool.StopWorker(beam_fn_api_pb2.StopWorkerRequest(worker_id=worker_id), timeout=connect_timeout)
            except grpc.RpcError:
                pass
            server.stop(0)
    finally:
        channel.close()


def _probe_control_server(connected: queue.Queue):
    """A Fn API control server that notes a worker's connection and ends its stream at once."""
    from concurrent import futures

    import grpc
    from apache_beam.portability.api import beam_fn_api_pb2_grpc

    class Control(beam_fn_api_pb2_grpc.BeamFnControlServicer):
        def Control(self, request_iterator, context):  # noqa: N802 (gRPC's name)
            connected.put(dict(context.invocation_metadata()).get("worker_id"))
            return iter(())

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    beam_fn_api_pb2_grpc.add_BeamFnControlServicer_to_server(Control(), server)
    port = server.add_insecure_port("[::]:0")
    server.start()
    return server, f"{worker_host()}:{port}"


def _on_this_machine(host: str) -> bool:
    """A pool here runs its workers here, so they must resolve this machine's name themselves."""
    return host in ("localhost", "127.0.0.1", "::1", "0.0.0.0", socket.gethostname())


def worker_host() -> str:
    """The host name Beam's own runner gives workers for its control server
    (ExternalWorkerHandler.host_from_worker, Beam 2.59 to 2.77)."""
    return "localhost" if sys.platform in ("win32", "darwin") else socket.getfqdn()


def _check_worker_host(address: str) -> None:
    host = worker_host()
    try:
        socket.getaddrinfo(host, None)
    except OSError as error:
        raise _error(address, f"would start workers that cannot reach this run: Beam tells every worker to connect "
                              f"back to this machine by its name, {host!r}, which does not resolve here "
                              f"({error.strerror or error})",
                     fix=f"Add the name to /etc/hosts (e.g. `127.0.1.1 {host}`; in a chroot or container, copy the "
                         "host's /etc/hosts in)") from None


_START_A_POOL = ("Start a pool with this project's environment (`python -m pipeline beam-pool --port PORT`, or "
                 "`make beam-pool`) and pass its host:port as --beam-arg=--environment_config=HOST:PORT")


def _error(address: str, problem: str, fix: str = _START_A_POOL) -> ConfigError:
    return ConfigError(
        SETTING, f"the Beam worker pool at {address!r} {problem}. The run stops before any component "
                 f"starts (Beam would otherwise wait for the worker forever). {fix}, or drop the "
                 "--beam-arg=--environment_type=EXTERNAL option to run on the DirectRunner.")

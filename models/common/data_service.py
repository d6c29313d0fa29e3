"""Read the Trainer's input through tf.data service: input pipelines run by service workers.

``tf.data.experimental.service`` moves the input pipeline (reading, parsing, shuffling,
batching) out of the training process into *workers* coordinated by a *dispatcher*, so
input preprocessing scales on machines other than the trainer's. The setting is an
address:

- ``HOST:PORT`` (or ``grpc://HOST:PORT``): a running dispatcher (e.g. the
  ``tf.data.experimental.service.DispatchServer`` of a cluster). It is checked first,
  bounded by :data:`CONNECT_TIMEOUT_S`: TF's client would otherwise retry an unreachable
  dispatcher for as long as training runs.
- ``auto``: a dispatcher and :data:`LOCAL_WORKERS` worker(s) started in this process for
  the run, which exercises the same serialization and transport path (benchmarks/README.md
  measures its cost against the in-process input).

Processing mode ``parallel_epochs``: each worker produces the whole dataset and the
trainer reads from all of them. Their shuffles are therefore left unseeded (a seeded
shuffle would give every worker the same order, and the trainer each batch once per
worker); a run through the service is not bit-for-bit reproducible.
"""
from __future__ import annotations

import threading

from stackenv.errors import ConfigError

AUTO = "auto"
FLAG = "--data-service"
CONNECT_TIMEOUT_S = 10
LOCAL_WORKERS = 1

_local_lock = threading.Lock()
_local_servers: list = []  # kept alive for the process: the datasets read from them


def target(setting: str) -> str:
    """The dispatcher target (``grpc://host:port``) for a setting; starts local servers for ``auto``."""
    setting = (setting or "").strip()
    if setting == AUTO:
        return _local_dispatcher()
    address = setting.split("://", 1)[1] if "://" in setting else setting
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(FLAG, f"takes {AUTO!r} or a dispatcher address HOST:PORT, got {setting!r}.")
    check_reachable(address)
    return f"grpc://{address}"


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    import grpc

    channel = grpc.insecure_channel(address)
    try:
        grpc.channel_ready_future(channel).result(timeout=timeout)
    except grpc.FutureTimeoutError:
        raise ConfigError(
            FLAG, f"the tf.data service dispatcher at {address!r} did not answer within {timeout:g} s, so "
                  "training would wait for its input forever. Start the dispatcher (and its workers) at that "
                  f"address, pass the address it listens on, use {FLAG} {AUTO} to start a local dispatcher "
                  f"and worker for the run, or leave {FLAG} out to read the input in process.") from None
    finally:
        channel.close()


def _local_dispatcher() -> str:
    import tensorflow as tf

    service = tf.data.experimental.service
    with _local_lock:
        if not _local_servers:
            dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
            address = dispatcher.target.split("://", 1)[1]
            workers = [service.WorkerServer(service.WorkerConfig(dispatcher_address=address, port=0))
                       for _ in range(LOCAL_WORKERS)]
            _local_servers.extend([dispatcher, *workers])
        return _local_servers[0].target


def distribute(dataset, dispatcher: str, job_name: str | None = None):
    """``dataset`` read through the tf.data service at ``dispatcher`` (from :func:`target`; a
    shared ``job_name`` makes several trainers, e.g. multi-worker replicas, split one stream)."""
    import tensorflow as tf

    return dataset.apply(tf.data.experimental.service.distribute(
        processing_mode=tf.data.experimental.service.ShardingPolicy.OFF, service=dispatcher,
        job_name=job_name))

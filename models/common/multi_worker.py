"""Training across worker processes: the cluster from ``TF_CONFIG``, who exports, bounded waits.

``MultiWorkerMirroredStrategy`` runs the same ``run_fn`` in every worker process; each
reads its place in the cluster from the ``TF_CONFIG`` environment variable (set by a
Kubeflow TFJob, or by hand). Three things the strategy leaves to the caller:

- **A bad ``TF_CONFIG``** fails deep inside TensorFlow with a message about cluster specs,
  or silently trains a one-worker "cluster": it is checked here first and reported as a
  :class:`ConfigError` naming ``TF_CONFIG``.
- **Only the chief exports.** Every worker must run the save (a save of distributed
  variables is a collective step), so, as TF's multi-worker tutorial does, the chief
  writes to the real serving directory and the others to a scratch directory that is
  removed afterwards: the serving directory never holds a non-chief's copy.
- **Bounded waits.** TF waits forever for the cluster to form and notices a dead peer late;
  :func:`make_multi_worker_strategy` bounds both (stackenv.compat hook) and
  :func:`worker_failures` turns the aborted collectives into one paragraph, so a worker
  that dies ends the others with a message instead of a hang, and the Trainer fails
  (nothing is pushed).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from stackenv.errors import EXIT_PIPELINE_FAILED, ConfigError, ProjectError

ENV = "TF_CONFIG"
WORKER_TYPES = ("chief", "worker")
#: How long a worker waits for every other worker of the cluster to start.
CLUSTER_WAIT_S = 120
#: How often each worker checks that its peers are alive, and how long one check may take.
HEALTH_CHECK_INTERVAL_S = 5
PEER_TIMEOUT_S = 5
PEER_RETRIES = 2

_ADDRESS = re.compile(r"^[^\s:]+:\d{1,5}$")


class WorkerFailure(ProjectError):
    """A peer of a multi-worker cluster died or never came up; training stopped."""

    exit_code = EXIT_PIPELINE_FAILED


@dataclass(frozen=True)
class ClusterPlace:
    """This process's place in the ``TF_CONFIG`` cluster."""

    cluster: dict
    task_type: str
    task_index: int

    @property
    def num_workers(self) -> int:
        return sum(len(self.cluster.get(kind, [])) for kind in WORKER_TYPES)

    @property
    def is_chief(self) -> bool:
        """The ``chief`` task, or worker 0 of a cluster without one (TF's convention)."""
        if self.task_type == "chief":
            return True
        return self.task_type == "worker" and self.task_index == 0 and not self.cluster.get("chief")

    def describe(self) -> str:
        return f"{self.task_type} {self.task_index} of {self.num_workers} worker(s)"


def _bad(problem: str, raw: str | None = None) -> ConfigError:
    shown = f" (it is {raw[:200]!r})" if raw else ""
    return ConfigError(
        ENV, f"--strategy multi_worker reads the cluster from the {ENV} environment variable, but "
             f"{problem}{shown}. Set {ENV} in every worker process to JSON like "
             '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, "task": {"type": "worker", "index": 0}} '
             "(the same cluster everywhere, each process its own task index), or train on one machine "
             "with --strategy mirrored.")


def read_tf_config(environ=None) -> ClusterPlace:
    """This process's place in the cluster, or a :class:`ConfigError` naming ``TF_CONFIG``."""
    raw = (os.environ if environ is None else environ).get(ENV, "")
    if not raw.strip():
        raise _bad(f"{ENV} is not set")
    try:
        config = json.loads(raw)
    except ValueError as error:
        raise _bad(f"it is not valid JSON ({error})", raw) from None
    if not isinstance(config, dict):
        raise _bad("it is not a JSON object", raw)
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not any(cluster.get(kind) for kind in WORKER_TYPES):
        raise _bad('it has no "cluster" with a "worker" (or "chief") list of host:port addresses', raw)
    for kind, addresses in cluster.items():
        if not isinstance(addresses, list) or not all(isinstance(a, str) and _ADDRESS.match(a)
                                                      for a in addresses):
            raise _bad(f'cluster "{kind}" must be a list of host:port addresses', raw)
    if len(cluster.get("chief", [])) > 1:
        raise _bad('a cluster has at most one "chief"', raw)
    task = config.get("task")
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise _bad('it has no "task" with this process\'s "type" and "index"', raw)
    task_type, index = task["type"], task["index"]
    if task_type not in cluster or not isinstance(index, int) or isinstance(index, bool) \
            or not 0 <= index < len(cluster[task_type]):
        raise _bad(f'its task ({task_type!r}, index {index!r}) is not one of the cluster\'s addresses', raw)
    if task_type not in WORKER_TYPES:
        raise _bad(f'its task type {task_type!r} is not a training worker ("chief" or "worker")', raw)
    return ClusterPlace(cluster=cluster, task_type=task_type, task_index=index)


def make_multi_worker_strategy():
    """A ``MultiWorkerMirroredStrategy`` for this process's ``TF_CONFIG`` place, with bounded waits."""
    from stackenv import compat

    import tensorflow as tf

    place = read_tf_config()
    compat.bound_multi_worker_waits(CLUSTER_WAIT_S, HEALTH_CHECK_INTERVAL_S, PEER_TIMEOUT_S, PEER_RETRIES)
    with worker_failures(place):
        return tf.distribute.MultiWorkerMirroredStrategy()


def is_multi_worker(strategy) -> bool:
    import tensorflow as tf

    return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)


@contextlib.contextmanager
def worker_failures(place: ClusterPlace | None = None) -> Iterator[None]:
    """Turn a dead or missing peer (aborted collectives, cluster wait timeout) into one paragraph."""
    import tensorflow as tf

    try:
        yield
    except (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.CancelledError,
            tf.errors.InternalError) as error:
        raise _failure(place, error) from error
    except RuntimeError as error:
        if "waiting for the cluster" not in str(error):
            raise
        raise _failure(place, error, waiting=True) from error


def _failure(place: ClusterPlace | None, error: BaseException, waiting: bool = False) -> WorkerFailure:
    place = place or _place_or_none()
    where = f"This process is {place.describe()} in {ENV}. " if place else ""
    first = str(error).strip().splitlines()[0][:300] if str(error).strip() else type(error).__name__
    if waiting:
        what = (f"Multi-worker training did not start: not every worker of the {ENV} cluster came up "
                f"within {CLUSTER_WAIT_S} s ({first}). ")
    else:
        what = (f"Multi-worker training stopped: a worker of the {ENV} cluster died or became "
                f"unreachable ({type(error).__name__}: {first}). ")
    return WorkerFailure(
        what + where + "Nothing was exported, so nothing is pushed. Start every worker listed in "
        f"{ENV} (same cluster, each its own task index) with ports reachable between them, "
        "then run all of them again.")


def _place_or_none() -> ClusterPlace | None:
    try:
        return read_tf_config()
    except ConfigError:
        return None


@contextlib.contextmanager
def export_dir(strategy, serving_model_dir: str) -> Iterator[str]:
    """Where this worker writes the exported model: the real dir on the chief, else scratch.

    Every worker must run the export (TF's multi-worker save pattern); only the chief's
    copy is kept. Failures of a peer during the export end as :class:`WorkerFailure`.
    """
    if not is_multi_worker(strategy):
        yield serving_model_dir
        return
    place = read_tf_config()
    with worker_failures(place):
        if place.is_chief:
            yield serving_model_dir
            return
        scratch = tempfile.mkdtemp(prefix=f"export-{place.task_type}-{place.task_index}-")
        try:
            yield scratch
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

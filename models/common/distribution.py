"""Pick the tf.distribute strategy named in the config.

Model code builds and compiles inside ``strategy.scope()`` and scales its global batch
by ``num_replicas_in_sync``; which strategy is used is configuration, not code.
"""
import logging

from stackenv.compat import device_datasets_without_autotune

import tensorflow as tf

STRATEGIES = ("mirrored", "multi_worker", "default")

log = logging.getLogger(__name__)


def mirrored_devices() -> list[str]:
    """The devices ``mirrored`` replicates over: every logical GPU, else every logical CPU."""
    return [d.name for d in tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")]


def make_strategy(name: str = "mirrored") -> tf.distribute.Strategy:
    """Return the strategy for ``name``.

    ``mirrored`` uses every GPU; on a CPU-only host it mirrors over all *logical* CPU
    devices when more than one is configured (tests use that to get real replicas),
    else the single CPU. ``multi_worker`` reads the cluster from ``TF_CONFIG``
    (models/common/multi_worker.py: checked first, waits for peers bounded).
    """
    device_datasets_without_autotune()  # else every fit ends waiting on an autotuning thread (stackenv/compat.py)
    if name == "mirrored":
        strategy = tf.distribute.MirroredStrategy(devices=mirrored_devices())
    elif name == "multi_worker":
        from models.common.multi_worker import make_multi_worker_strategy

        strategy = make_multi_worker_strategy()  # validates TF_CONFIG, bounds the waits
    elif name == "default":
        strategy = tf.distribute.get_strategy()
    else:
        raise ValueError(f"Unknown distribution strategy {name!r}; choose one of {STRATEGIES}.")
    log.info("Distribution strategy %s with %d replica(s) in sync",
             type(strategy).__name__, strategy.num_replicas_in_sync)
    return strategy

"""Checks of the scale-out settings before a local run starts, so a bad one costs seconds.

Each check reads one setting a run depends on outside this process (``TF_CONFIG`` for
``--strategy multi_worker``, the Beam worker pool) and raises the :class:`ConfigError` naming it; the checks
that need the network are bounded by timeouts.
"""
from pipeline.config import PipelineConfig


def check_run(config: PipelineConfig) -> None:
    if config.strategy == "multi_worker":
        from models.common.multi_worker import read_tf_config

        read_tf_config()  # ConfigError naming TF_CONFIG when missing or malformed
    if config.data_service and config.data_service != "auto":
        from models.common.data_service import target

        target(config.data_service)  # an unreachable dispatcher: a ConfigError in seconds
    from pipeline.local import beam_pool

    pool = beam_pool.external_pool_address(config.beam_args)
    if pool is not None:
        beam_pool.check_pool(pool)  # a pool that cannot start a worker: seconds, not a hang

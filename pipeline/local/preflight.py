"""Checks before a local run starts, so a bad setting or a full disk costs seconds.

Each check reads one thing a run depends on outside this process (free space under
``--output``, ``TF_CONFIG`` for ``--strategy multi_worker``, the Beam worker pool) and
raises the paragraph naming it; the checks that need the network are bounded by timeouts.
"""
import os
import shutil

from stackenv.errors import PathError

from pipeline.config import PipelineConfig

#: Free space a run needs under --output before it starts (MLMD's SQLite, artifacts, the
#: serving copy). A floor, not an estimate: SQLite on a full disk fails half-way through a
#: write with "database or disk is full". Override with this variable (in MB).
MIN_FREE_ENV = "TFX_PROJECT_MIN_FREE_MB"
DEFAULT_MIN_FREE_MB = 512


def check_free_space(output_dir: str) -> None:
    """PathError naming ``output_dir`` and its free space when below the floor."""
    if "://" in output_dir:
        return
    existing = os.path.abspath(output_dir)
    while not os.path.exists(existing) and os.path.dirname(existing) != existing:
        existing = os.path.dirname(existing)
    try:
        free_mb = shutil.disk_usage(existing).free / 2**20
    except OSError:
        return  # an unusable path is reported by the first write, naming it
    try:
        needed = float(os.environ.get(MIN_FREE_ENV, DEFAULT_MIN_FREE_MB))
    except ValueError:
        needed = DEFAULT_MIN_FREE_MB
    if free_mb < needed:
        raise PathError(f"--output {output_dir}: only {free_mb:.0f} MB free on its disk ({existing}), a run needs at "
                        f"least {needed:.0f} MB (ML Metadata, models, the serving copy). Free space there or "
                        f"choose another --output (the floor is set by {MIN_FREE_ENV}).", output_dir)


def check_no_symlinks(output_dir: str) -> None:
    """PathError naming the first symbolic link inside ``output_dir``: every write of a run
    (MLMD, artifacts, the serving dir, logs) lands inside it, and a link planted there would
    carry a write, or a rename of a new model version, to wherever it points. ``--output``
    itself may be a link: the user chose it. Reads d_type only: no stat per file."""
    if "://" in output_dir or not os.path.isdir(output_dir):
        return
    folders = [output_dir]
    while folders:
        try:
            entries = list(os.scandir(folders.pop()))
        except OSError:
            continue  # unreadable: the first write there names it
        for entry in entries:
            if entry.is_symlink():
                raise PathError(f"{entry.path} is a symbolic link (to {os.readlink(entry.path)}) inside --output "
                                f"{output_dir}; a run writes only real files and folders there. Remove the link, "
                                "or pass its target as --output.", entry.path)
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.path)


def check_run(config: PipelineConfig) -> None:
    from pipeline.local.memory import check_memory

    check_free_space(config.output_dir)
    check_memory(config)  # before anything is allocated: the batch and the Beam workers against free memory
    check_no_symlinks(config.output_dir)
    if os.path.isfile(config.metadata_path):  # a damaged store: one paragraph now, not TFX's SQL midway
        from pipeline.results import mlmd

        mlmd.open_store(mlmd.sqlite_config(config.metadata_path))
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

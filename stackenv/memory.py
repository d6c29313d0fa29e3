"""The memory this process may still take: what the pre-checks of a run (pipeline/local/memory.py) and of a
step (the text Trainer's count model, models/seq2seq/memory.py) compare their estimates with.

The kernel's MemAvailable, or less when a cgroup limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``:
a container or a Kubernetes pod) leaves less room. Sits beside :mod:`stackenv.errors`: imports nothing of the project.
"""
from __future__ import annotations

CGROUP_MAX = "/sys/fs/cgroup/memory.max"
CGROUP_CURRENT = "/sys/fs/cgroup/memory.current"
CGROUP_STAT = "/sys/fs/cgroup/memory.stat"
#: cgroup v1 (older Docker and Kubernetes nodes): the memory controller's hierarchy, and where this process sits
#: in it (``/proc/self/cgroup``; inside a container's namespace that is "/").
CGROUP_V1 = "/sys/fs/cgroup/memory"
PROC_CGROUP = "/proc/self/cgroup"
#: cgroup v1 writes "no limit" as the largest page-aligned 64-bit count, not "max".
_V1_UNLIMITED = 2**62


def available_bytes() -> tuple[int, str]:
    """Bytes available to this process and where the figure comes from."""
    import psutil

    available, source = int(psutil.virtual_memory().available), "MemAvailable"
    limit = _cgroup_v2() or _cgroup_v1()
    if limit is not None and limit[0] < available:
        return limit
    return available, source


def _cgroup_v2() -> tuple[int, str] | None:
    try:
        with open(CGROUP_MAX) as handle:
            limit = handle.read().strip()
        room = _room(int(limit) if limit.isdigit() else None, CGROUP_CURRENT, CGROUP_STAT, "inactive_file")
    except (OSError, ValueError):
        return None
    return None if room is None else (room, f"the cgroup limit {CGROUP_MAX}")


def _cgroup_v1() -> tuple[int, str] | None:
    try:
        with open(PROC_CGROUP) as handle:
            path = next((line.rstrip("\n").split(":", 2)[2] for line in handle
                         if "memory" in line.split(":", 2)[1].split(",")), None)
    except (OSError, IndexError):
        return None
    for folder in dict.fromkeys([f"{CGROUP_V1}{path}".rstrip("/"), CGROUP_V1] if path else [CGROUP_V1]):
        try:
            with open(f"{folder}/memory.limit_in_bytes") as handle:
                limit = int(handle.read().strip())
            room = _room(limit if limit < _V1_UNLIMITED else None, f"{folder}/memory.usage_in_bytes",
                         f"{folder}/memory.stat", "total_inactive_file")
        except (OSError, ValueError):
            continue
        return None if room is None else (room, f"the cgroup limit {folder}/memory.limit_in_bytes")
    return None


def _room(limit: int | None, usage_file: str, stat_file: str, inactive_key: str) -> int | None:
    """The limit less the cgroup's working set; None without a limit."""
    if limit is None:
        return None
    with open(usage_file) as handle:
        usage = int(handle.read().strip())
    with open(stat_file) as handle:
        stat = dict(line.split() for line in handle if line.strip())
    # The usage counts the page cache too; the kernel drops its inactive part before it OOM-kills, so the
    # working set is usage minus inactive_file (as Kubernetes' kubelet counts it).
    return max(0, limit - max(0, usage - int(stat.get(inactive_key, 0))))


def memory_text(value: float) -> str:
    """``value`` bytes of memory as a person reads them: GiB with one decimal, MiB or KiB below one GiB (binary
    units, as memory is counted; file sizes are worded in decimal units by pipeline/results/tflite_summary.py)."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}" if unit == "GiB" else f"{value / scale:.0f} {unit}"
    return f"{value / 2**10:.0f} KiB"

"""What this process may use of the machine: CPUs and memory, as a container or `taskset` grants
them, not as the host has them.

A pod limited to 2 CPUs and 4 GB on a 64-core, 256 GB node sees all 64 cores in its affinity and
all 256 GB in /proc/meminfo. Torch threads sized to the node's cores are throttled to the quota's
CPU time and wait on each other; a plan sized to the node's memory is killed by the kernel's OOM
killer at the container's limit, mid-step. So both read the cgroup's limits (v2 ``cpu.max`` and
``memory.max``, v1 ``cpu.cfs_quota_us`` and ``memory.limit_in_bytes``) and take the smaller."""

from __future__ import annotations

import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cpus() -> float:
    """The CPUs this process may run on: its affinity, capped by a cgroup CPU quota where one is
    set (a quota may be a fraction: 1.5 CPUs)."""
    try:
        cpus = float(len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        cpus = float(os.cpu_count() or 1)
    quota = _cpu_quota()
    return min(cpus, quota) if quota else cpus


def usable_cores() -> int:
    """`usable_cpus` as a thread count: whole CPUs, at least one (a quota of 2.5 CPUs is 2)."""
    return max(1, int(usable_cpus()))


def usable_memory_bytes() -> int:
    """The machine's RAM, capped by the cgroup's memory limit where one is set."""
    import psutil

    total = int(psutil.virtual_memory().total)
    limit = _memory_limit()
    return min(total, limit) if limit else total


def _cpu_quota() -> float | None:
    v2 = _read(CGROUP / "cpu.max")
    if v2 is not None:  # "QUOTA PERIOD", or "max PERIOD" for none
        fields = v2.split()[:2]
    else:
        fields = [
            _read(CGROUP / "cpu" / f"cpu.cfs_{name}_us") or "" for name in ("quota", "period")
        ]
    try:
        quota, period = (float(f) for f in fields)
    except ValueError:  # v2 "max", an unreadable or odd file: no quota (v1 -1 is caught below)
        return None
    return quota / period if quota > 0 and period > 0 else None


def _memory_limit() -> int | None:
    """The cgroup's memory limit in bytes; None where it is unset ("max", or v1's unlimited: a
    page-rounded 2**63)."""
    for path in (CGROUP / "memory.max", CGROUP / "memory" / "memory.limit_in_bytes"):
        raw = _read(path)
        if raw is None:
            continue
        try:
            limit = int(raw)
        except ValueError:  # "max"
            return None
        return limit if 0 < limit < 2**62 else None
    return None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None

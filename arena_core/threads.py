"""Torch's thread count for the length of a run, and the OpenMP behaviour that keeps it fast when
other processes share the machine; restored afterwards.

A torch (OpenMP) thread pool that spins on a core another process holds collapses rather than
slowing by that process's share: measured here, one core held by a plain busy loop made a seeded
SmolLM2 step's generation 6.6x slower on both threads than on one, and on this loaded 2-core
machine a tiny model's step took 17.9 s on two spinning threads against 1.8 s with OpenMP's
passive wait policy. So `import arena_core` sets `OMP_WAIT_POLICY=PASSIVE` before torch loads
(`arena_core.PASSIVE_OPENMP` says whether it took effect), and then the default
(`runtime.threads: null`) is every usable core: with passive threads a busy core costs its share
only, and measured with one core held the two threads generated 0.61 s against 1.62 s on one.
Where the policy could not take effect (torch imported before arena_core, or the user's own
`OMP_WAIT_POLICY`), the default counts the cores other processes keep busy, sampled from
/proc/stat over a quarter of a second (this process's own CPU time taken out), and uses the rest.
An explicit `runtime.threads` (or `OMP_NUM_THREADS` in the environment) is obeyed as given.
`bench/threads_contention.py` measures the default against fixed counts, idle and with one core
held.

Every training loop is also a library call (`arena.train`): it must not leave the caller's
process with a different OpenMP thread count than it found."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from arena_core.machine import usable_cores

SAMPLE_S = 0.25  # long enough to see a busy process, short beside a run's start


def _busy_jiffies() -> tuple[int, int] | None:
    """(busy, total) jiffies of all CPUs from /proc/stat, or None where it cannot be read."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


def busy_elsewhere(interval_s: float = SAMPLE_S) -> float:
    """How many CPUs' worth of time other processes used over `interval_s` (0.0 where
    /proc/stat cannot be read): the machine's busy time less this process's own."""
    first, own = _busy_jiffies(), time.process_time()
    if first is None:
        return 0.0
    time.sleep(interval_s)
    second, own_now = _busy_jiffies(), time.process_time()
    if second is None or second[1] <= first[1]:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    busy_s = (second[0] - first[0]) / tick
    elapsed_s = (second[1] - first[1]) / tick / max(1, os.cpu_count() or 1)
    others = max(0.0, busy_s - (own_now - own))
    return others / max(elapsed_s, 1e-9)


def default_threads(*, say: bool = False) -> int:
    """The count a run uses without `runtime.threads`: torch's own when the user set
    OMP_NUM_THREADS; every usable core when OpenMP's threads wait passively; else the usable
    cores less those other processes keep busy (at least 1). `say`: print a choice that leaves
    cores unused, so a slower run explains itself."""
    from arena_core import PASSIVE_OPENMP

    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()
    cores = usable_cores()
    if PASSIVE_OPENMP:
        return cores
    busy = busy_elsewhere()
    chosen = max(1, min(cores, int(cores - busy + 0.5)))
    if say and chosen < cores:
        print(
            f"torch threads: {chosen} of {cores} cores ({busy:.1f} busy with other processes, "
            "and OpenMP's threads spin: torch was loaded before arena_core, or OMP_WAIT_POLICY "
            "is set). runtime.threads=N sets it.",
            file=sys.stderr,
            flush=True,
        )
    return chosen


@contextmanager
def torch_threads(count: int | None) -> Iterator[None]:
    """Run the block on `count` torch threads (None or 0: `default_threads()`, the CPUs free)."""
    previous = torch.get_num_threads()
    torch.set_num_threads(count or default_threads(say=True))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def run_threads(runtime_threads: int | None, algo_threads: int | None = None) -> int:
    """The torch thread count a run uses: `runtime.threads`, else the algorithm's own `threads`
    (PPO's, IPPO's), else `default_threads()`. One rule, so that what a dry run reports is what
    the run sets."""
    return int(runtime_threads or algo_threads or default_threads())

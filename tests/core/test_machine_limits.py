"""A container's limits are the machine: a run inside a pod limited to fewer CPUs and less memory
than its node sizes its torch threads and its plan to the limits, not to the node (threads
beyond the CPU quota are throttled and wait on each other; a plan beyond the memory limit is
killed by the OOM killer mid-step). Both cgroup layouts are read, v2 and v1."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from arena_core import machine
from arena_core.threads import torch_threads


def _v2(root: Path, cpu: str, memory: str) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(f"{cpu}\n")
    (root / "memory.max").write_text(f"{memory}\n")
    return root


def _v1(root: Path, quota_us: int, limit: int) -> Path:
    (root / "cpu").mkdir(parents=True)
    (root / "memory").mkdir()
    (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (root / "cpu" / "cpu.cfs_period_us").write_text("100000\n")
    (root / "memory" / "memory.limit_in_bytes").write_text(f"{limit}\n")
    return root


@pytest.fixture
def affinity() -> int:
    return len(os.sched_getaffinity(0))


def test_both_cgroup_layouts_cap_cpus_and_memory(tmp_path, monkeypatch, affinity) -> None:
    ram = machine.usable_memory_bytes()  # this test machine's, uncapped
    monkeypatch.setattr(machine, "CGROUP", _v2(tmp_path / "v2", "50000 100000", "2000000000"))
    assert machine.usable_cpus() == 0.5 and machine.usable_cores() == 1  # a thread at least
    assert machine.usable_memory_bytes() == min(ram, 2_000_000_000)

    monkeypatch.setattr(machine, "CGROUP", _v1(tmp_path / "v1", 150_000, 3_000_000_000))
    assert machine.usable_cpus() == min(affinity, 1.5)
    assert machine.usable_cores() == 1  # 1.5 CPUs of time: one whole thread
    assert machine.usable_memory_bytes() == min(ram, 3_000_000_000)

    # no limit set: "max" (v2), -1 and a page-rounded 2**63 (v1); the machine's own figures
    monkeypatch.setattr(machine, "CGROUP", _v2(tmp_path / "none2", "max 100000", "max"))
    assert machine.usable_cpus() == affinity and machine.usable_memory_bytes() == ram
    monkeypatch.setattr(machine, "CGROUP", _v1(tmp_path / "none1", -1, 9223372036854771712))
    assert machine.usable_cpus() == affinity and machine.usable_memory_bytes() == ram

    # a malformed file (a zero period, a lone field) is no quota, never an error
    for i, text in enumerate(("100000 0", "100000", "")):
        monkeypatch.setattr(machine, "CGROUP", _v2(tmp_path / f"odd{i}", text, "max"))
        assert machine.usable_cpus() == affinity


def test_a_run_in_a_limited_container_uses_its_quota(tmp_path, monkeypatch, capsys) -> None:
    """Through the real doors: a run's default torch thread count, and `arena plan`'s memory."""
    from arena_core.cli.main import main

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("arena_core.PASSIVE_OPENMP", True)  # as in `arena-run`
    monkeypatch.setenv("ARENA_PLAN_PROBE", "0")
    monkeypatch.setattr(machine, "CGROUP", _v1(tmp_path / "pod", 100_000, 2_000_000_000))
    with torch_threads(None):  # runtime.threads unset: one CPU of quota, one thread
        assert torch.get_num_threads() == 1

    assert main(["plan", "+experiment=quickstart"]) == 0
    out = capsys.readouterr().out
    assert "1 x cpu" in out
    usable = next(line for line in out.splitlines() if line.strip().startswith("usable"))
    assert usable.split()[2] == "1.8", usable  # 2 GB less the planner's safety margin

    # a limit below what the quickstart needs: refused before a step runs, not OOM-killed in one
    monkeypatch.setattr(machine, "CGROUP", _v2(tmp_path / "small", "max 100000", "400000000"))
    assert main(["plan", "+experiment=quickstart"]) != 0
    err = capsys.readouterr().err
    assert "No plan fits arena:tiny" in err and "on 1 x cpu (0.4 GB)" in err
    assert "0.36 GB usable" in err

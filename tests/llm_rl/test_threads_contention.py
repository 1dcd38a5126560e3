"""Threads that hold under contention: a process started from Arena has OpenMP's passive wait
policy (an idle pool thread sleeps rather than spinning on a core another process holds), so a
run without `runtime.threads` takes every core; where the policy could not take effect it leaves
the cores other processes hold; an explicit count is obeyed and the caller's count restored
(bench/threads_contention.py measures the generation times)."""

from __future__ import annotations

import os
import subprocess
import sys

import torch

from arena_core.machine import usable_cores
from arena_core.threads import busy_elsewhere, default_threads, torch_threads


def test_arena_sets_the_passive_wait_policy_before_torch_loads() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = "import arena_core, os, torch; print(os.environ['OMP_WAIT_POLICY'])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "PASSIVE", done.stderr
    env["OMP_WAIT_POLICY"] = "ACTIVE"  # the user's own setting is kept
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout.strip() == "ACTIVE"


def test_the_default_takes_every_core_and_a_busy_one_is_seen(monkeypatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("arena_core.PASSIVE_OPENMP", True)  # as in `arena-run` (first test)
    before = torch.get_num_threads()
    with torch_threads(None):  # passive OpenMP threads: a busy core costs its share only
        assert torch.get_num_threads() == usable_cores()
    assert torch.get_num_threads() == before  # a library call leaves the caller as it was
    with torch_threads(2):
        assert torch.get_num_threads() == 2  # runtime.threads=2 is obeyed as given

    # where OpenMP spins (torch loaded first), the cores other processes hold are left to them
    monkeypatch.setattr("arena_core.PASSIVE_OPENMP", False)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        assert busy_elsewhere(0.5) >= 0.8  # a whole core's worth, this process's own time aside
        chosen = default_threads()
    finally:
        hog.kill()
        hog.wait()
    assert 1 <= chosen <= max(1, usable_cores() - 1)

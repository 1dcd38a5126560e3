"""The hostile battery: right verdict, bounded time, this process alive, nothing left running."""

from __future__ import annotations

import os
import time

import psutil

from arena_core.sandbox import isolation_status

REWARD_TIMEOUT = 2.0
ENV_TIMEOUT = 3.0


def test_hostile_battery(battery, tmp_path, monkeypatch):
    pidfile = tmp_path / "grandchildren"
    monkeypatch.setenv("ARENA_TEST_PIDFILE", str(pidfile))
    monkeypatch.setenv("ARENA_BATTERY_SECRET_TOKEN", "must-not-leak")
    cases = battery.REWARDS + battery.ENV_CASES
    assert len(battery.REWARDS) >= 20 and len(battery.ENV_CASES) >= 10
    started = time.monotonic()
    results = battery.run_battery(
        cases, parallel=2, reward_timeout=REWARD_TIMEOUT, env_timeout=ENV_TIMEOUT
    )
    total = time.monotonic() - started
    wrong = [(r.case.target, r.verdict, r.check_status, r.detail) for r in results if not r.ok]
    assert not wrong, wrong
    slow = [
        (r.case.target, round(r.seconds, 2))
        for r in results
        if r.seconds >= 2 * (REWARD_TIMEOUT if r.case.kind == "reward" else ENV_TIMEOUT)
    ]
    assert not slow, slow
    print(f"battery: {len(results)} cases in {total:.1f} s")
    # the grandchild spawned by grandchild.py (one per worker) is dead. Under kernel isolation
    # it cannot write its pid (read-only file system): the autouse no-leftover check covers it.
    if isolation_status().mode == "bwrap":
        assert not pidfile.exists()
        return
    pids = [int(p) for p in pidfile.read_text().split()]
    assert pids
    for pid in pids:
        try:
            assert psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            pass
    assert psutil.pid_exists(os.getpid())

"""Where the kernel refuses namespaces, Arena says so once and runs with the limits it still has;
`sandbox.require_isolation=true` makes that fatal. No silent downgrade."""

from __future__ import annotations

import stat

import pytest

from arena_core.config.schema import SandboxConfig
from arena_core.sandbox import (
    RewardPool,
    SandboxIsolationError,
    SandboxPolicy,
    isolation,
    isolation_status,
    run_in_sandbox,
)


@pytest.fixture
def no_user_namespaces(tmp_path, monkeypatch):
    """A bwrap that fails the way it does in a container forbidding user namespaces."""
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(isolation, "bwrap_binary", lambda: str(fake))
    monkeypatch.setattr(isolation, "_announced", set())
    isolation._status.cache_clear()
    yield
    isolation._status.cache_clear()


def test_limited_isolation_is_said_once_and_still_scores(no_user_namespaces, write_reward, capfd):
    status = isolation_status()
    assert status.mode == "limited" and not status.full
    line = status.line()
    assert line.startswith("sandbox: isolation=limited (no user namespaces: bwrap: setting up")
    assert "NOT in force: PID namespace" in line and "process-count limit" in line
    assert "in force: wall-clock timeout" in line
    path = write_reward("def reward(q, a, c):\n    return 1.0\n")
    for _ in range(2):
        with RewardPool(path, workers=1) as pool:
            assert pool.score([("q", "a", "c")])[0].value == 1.0
    assert run_in_sandbox("os:getpid").ok
    assert capfd.readouterr().err.count("sandbox: isolation=limited (no user namespaces") == 1


def test_require_isolation_makes_it_fatal(no_user_namespaces, write_reward):
    path = write_reward("def reward(q, a, c):\n    return 1.0\n")
    with pytest.raises(SandboxIsolationError, match="require_isolation") as err:
        RewardPool(path, policy=SandboxPolicy(require_isolation=True))
    assert "no user namespaces" in str(err.value)
    with pytest.raises(SandboxIsolationError):
        RewardPool(path, policy=SandboxPolicy(isolation="bwrap"))


def test_isolation_none_is_selectable_and_said(write_reward, capfd, monkeypatch):
    monkeypatch.setattr(isolation, "_announced", set())
    path = write_reward("import os\ndef reward(q, a, c):\n    return float(os.getpid() > 2)\n")
    with RewardPool(path, workers=1, policy=SandboxPolicy(isolation="none")) as pool:
        assert pool.score([("q", "a", "c")])[0].value == 1.0  # a host pid: no namespace
    assert "sandbox: isolation=none" in capfd.readouterr().err


def test_policy_comes_from_the_config():
    cfg = SandboxConfig(network=True, max_processes=8, require_isolation=True)
    policy = SandboxPolicy.from_config(cfg)
    assert (policy.network, policy.max_processes, policy.require_isolation) == (True, 8, True)
    assert SandboxPolicy.from_config({"isolation": "none"}).isolation == "none"

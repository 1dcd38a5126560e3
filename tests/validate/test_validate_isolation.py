"""Validation runs user code under the run's sandbox policy and says which protections hold.

`arena validate` and arena-run's pre-flight report the isolation in force (PASS), the protections
that are not (WARN, where the kernel forbids namespaces), and refuse to run user code at all when
`sandbox.require_isolation=true` cannot be honoured (FAIL), as training does. `sandbox.network`
is honoured in validation as in training.
"""

from __future__ import annotations

import argparse
import json
import socket
import stat
import threading

import pytest

from arena_core.cli import cmd_validate
from arena_core.cli.preflight import preflight
from arena_core.errors import ConfigError
from arena_core.sandbox import SandboxPolicy, isolation, isolation_status
from arena_core.testing import RewardConformance, load_reward_file
from arena_core.validate import preflight_report, validate_env, validate_reward

NOT_IN_FORCE = "NOT in force: PID namespace"


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


@pytest.fixture(autouse=True)
def no_plugins(monkeypatch):
    """Skip loading the installed plugins (slow): these tests name files, not registered names."""
    from arena_core import plugin_loader as plugins

    monkeypatch.setattr(plugins, "_PLUGINS", plugins.PluginSet())


def run_cli(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", *argv])
    return args.func(args)


def preflight_cfg(reward: str, **sandbox: object) -> dict:
    """A composed config's shape, with an env that generates its rows (none to check here)."""
    base = {"reward_timeout_s": 5.0, "workers": 1, "memory_mb": 1024}
    return {"reward": reward, "env": {"name": "not-registered"}, "sandbox": {**base, **sandbox}}


def test_full_isolation_is_one_pass_line(fixtures, capsys):
    status = isolation_status()
    good = str(fixtures / "hostile_rewards" / "good.py")
    report = validate_reward(good, samples=2)
    check = report.check("isolation")
    assert check is not None and check.detail == status.line()
    assert check.status == ("PASS" if status.full else "WARN")
    capsys.readouterr()
    preflight(preflight_cfg(good))  # arena-run says the isolation in force in one line
    out, err = capsys.readouterr()
    if status.full:
        assert out.strip() == status.line() and "isolation=bwrap" in out
    else:  # the pre-flight's WARN table (its detail names what is missing)
        assert "sandbox.isolation" in err and "WARN" in err


def test_limited_isolation_is_a_warn_naming_what_is_missing(no_user_namespaces, fixtures, capfd):
    good = str(fixtures / "hostile_rewards" / "good.py")
    report = validate_reward(good, samples=2)
    check = report.check("isolation")
    assert check.status == "WARN" and check.detail.startswith("sandbox: isolation=limited")
    assert NOT_IN_FORCE in check.detail and "no network" in check.detail
    assert report.verdict == "WARN", report.summary()
    assert report.check("gold_vs_garbage").status == "PASS"  # the reward was still scored

    pre = preflight_report(preflight_cfg(good))
    assert [c.name for c in pre.checks].count("sandbox.isolation") == 1
    assert not any(c.name in ("reward.isolation", "env.isolation") for c in pre.checks)
    assert pre.check("sandbox.isolation").status == "WARN"
    assert NOT_IN_FORCE in pre.check("sandbox.isolation").detail
    assert pre.verdict == "WARN"
    # said once on stderr however many pools started, and in every report
    assert capfd.readouterr().err.count("sandbox: isolation=limited") == 1


def test_require_isolation_is_fatal_before_user_code_runs(no_user_namespaces, fixtures, capsys):
    good = str(fixtures / "hostile_rewards" / "good.py")
    strict = SandboxPolicy(require_isolation=True)
    report = validate_reward(good, policy=strict)
    assert report.verdict == "FAIL"
    assert [c.name for c in report.checks] == ["isolation"]  # nothing of the file was run
    assert "require_isolation" in report.check("isolation").detail
    assert NOT_IN_FORCE in report.check("isolation").detail

    env = validate_env(str(fixtures / "broken_envs" / "envs.py:GoodEnv"), policy=strict)
    assert env.verdict == "FAIL" and [c.name for c in env.checks] == ["isolation"]

    pre = preflight_report(preflight_cfg(good, require_isolation=True))
    assert pre.verdict == "FAIL" and [c.name for c in pre.checks] == ["sandbox.isolation"]

    assert run_cli("reward", good, "sandbox.require_isolation=true", "--json") == 1
    data = json.loads(capsys.readouterr().out)
    assert data["verdict"] == "FAIL" and data["checks"][0]["name"] == "isolation"


def test_cli_refuses_a_misspelt_sandbox_key(fixtures):
    with pytest.raises(ConfigError, match="netwrk"):
        run_cli("reward", str(fixtures / "hostile_rewards" / "good.py"), "sandbox.netwrk=true")


@pytest.fixture
def listener():
    """A TCP listener on 127.0.0.1 that accepts and closes connections; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join(timeout=2)
    server.close()


def test_sandbox_network_is_honoured_in_validation(listener, write_connecting_reward):
    path = write_connecting_reward(listener)
    missing = isolation_status().missing  # "net" where the kernel gives no network namespace
    closed = validate_reward(path, samples=2)
    assert closed.info["max"] == (1.0 if "net" in missing else 0.0), closed.summary()
    opened = validate_reward(path, samples=2, policy=SandboxPolicy(network=True))
    assert opened.info["max"] == 1.0, opened.summary()
    assert "network allowed (sandbox.network=true)" in opened.check("isolation").detail
    # arena-run's pre-flight takes it from the config, as training does
    pre = preflight_report(preflight_cfg(path, network=True))
    assert pre.info["reward"]["max"] == 1.0, pre.summary()


@pytest.fixture
def write_connecting_reward(tmp_path):
    def write(port: int) -> str:
        path = tmp_path / "connects.py"
        path.write_text(
            "import socket\n\n"
            "def reward(question, answer, completion):\n"
            "    try:\n"
            f"        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n"
            "    except OSError:\n"
            "        return 0.0\n"
            "    return 1.0\n"
        )
        return str(path)

    return write


def test_bool_and_int_returns_warn_and_score_as_floats(fixtures, write_reward):
    report = validate_reward(str(fixtures / "hostile_rewards" / "returns_bool.py"), samples=2)
    check = report.check("return_type")
    assert check.status == "WARN" and check.detail.startswith("returns bool, converted to float")
    assert report.check("gold_vs_garbage").status == "PASS"  # True scored 1.0, False 0.0
    assert report.info["max"] == 1.0 and report.info["min"] == 0.0
    ints = validate_reward(write_reward("def reward(q, a, c):\n    return int(a in c)\n"))
    assert ints.check("return_type").detail.startswith("returns int, converted to float")

    class BoolReward(RewardConformance):  # a plugin's conformance test agrees: a warning
        reward = str(fixtures / "hostile_rewards" / "returns_bool.py")
        samples = [("2+2?", "4", "4", "5")]

    suite = BoolReward()
    fn = load_reward_file(suite.reward_path()).reward
    with pytest.warns(UserWarning, match="returned bool .*, converted to float"):
        suite.test_good_beats_bad(fn)


def test_no_successful_call_is_not_a_type_warning(write_reward):
    report = validate_reward(write_reward("def reward(q, a, c):\n    raise ValueError(c)\n"))
    check = report.check("return_type")
    assert check.status == "SKIP" and "converted" not in check.detail
    assert report.check("exceptions").status == "FAIL"


@pytest.fixture
def write_reward(tmp_path):
    def write(body: str) -> str:
        path = tmp_path / "reward.py"
        path.write_text(body)
        return str(path)

    return write


def test_training_components_follow_the_pools_policy(listener, tmp_path):
    """A reward's `components` (one sandboxed call per batch in training) run under the run's
    sandbox policy, as `reward` does in the pool."""
    from arena_core.run_parts.scoring import RewardScorer
    from arena_core.sandbox import RewardPool

    path = tmp_path / "components.py"
    path.write_text(
        "import socket\n\n"
        "def reachable():\n"
        "    try:\n"
        f"        socket.create_connection(('127.0.0.1', {listener}), timeout=1).close()\n"
        "    except OSError:\n"
        "        return 0.0\n"
        "    return 1.0\n\n"
        "def reward(question, answer, completion):\n"
        "    return reachable()\n\n"
        "def components(question, answer, completion):\n"
        "    return {'network': reachable()}\n"
    )
    closed = 1.0 if "net" in isolation_status().missing else 0.0
    for policy, expected in ((SandboxPolicy(network=True), 1.0), (SandboxPolicy(), closed)):
        with RewardPool(str(path), workers=1, policy=policy) as pool:
            scorer = RewardScorer(pool, path=str(path))
            values, kinds, comps = scorer.score_with_components([("q", "a", "c")])
        assert kinds == ["ok"] and values == [expected]
        assert comps == {"network": [expected]}, (policy, comps)

"""The air-traffic-control plugin (plugins/arena-atc), installed like a user would: it validates
PASS with `arena validate env`, passes its own conformance tests, and PPO learns it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from .conftest import ATC_DIR, train


class _Outcomes:
    def __init__(self) -> None:
        self.outcomes: dict[str, str] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" or report.outcome != "passed":
            self.outcomes[report.nodeid] = report.outcome


def test_atc_validates_pass(atc_installed: str) -> None:
    from arena_core.validate.env import validate_env

    report = validate_env("atc")
    assert report.verdict == "PASS", [(c.name, c.status, c.detail) for c in report.checks]
    assert report.info.get("kind") == "gymnasium"


def test_atc_plugin_own_tests_pass(atc_installed: str) -> None:
    collector = _Outcomes()
    before = set(sys.modules)
    try:
        code = pytest.main(
            [str(ATC_DIR / "tests"), "-q", "-p", "no:cacheprovider", "--import-mode=importlib"],
            plugins=[collector],
        )
    finally:  # the plugin's `tests` package would shadow this suite's (`from tests.serve ...`)
        for name in set(sys.modules) - before:
            if name == "tests" or name.startswith("tests."):
                del sys.modules[name]
    failed = sorted(n for n, o in collector.outcomes.items() if o == "failed")
    assert code == 0 and not failed, failed
    passed = [n for n, o in collector.outcomes.items() if o == "passed"]
    assert any("test_gymnasium_checker" in n for n in passed)  # EnvConformance's gym checks ran
    assert len(passed) >= 10


def test_ppo_runs_the_atc_experiment(atc_installed: str, tmp_path: Path) -> None:
    """The shipped experiment, cut to 2 updates: MultiDiscrete actions through the whole loop.
    (Learning it takes minutes: bench/atc.py measures random, baseline and trained returns.)"""
    from arena_core.classic_rl.policy import load_gym_policy

    run_dir = train(
        tmp_path,
        "+experiment=atc",
        "train.max_steps=2",
        "env.num_envs=4",
        "algo.num_steps=64",
        "eval.every=0",
        "eval.episodes=2",
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["env_steps"] == 2 * 4 * 64
    act = load_gym_policy(run_dir)
    action = act([0.0] * 30)
    assert isinstance(action, list) and len(action) == 3 and all(0 <= a < 5 for a in action)

"""arena-run's preflight: the same validators, stopping on FAIL before any model loads."""

from __future__ import annotations

import json

import pytest

from arena_core.errors import ArenaError
from arena_core.validate import ValidationFailed, preflight_report, validate_before_run


def cfg_for(reward: str, data_path: str) -> dict:
    return {
        "reward": reward,
        "env": {"name": "not-registered-here", "path": data_path},
        "sandbox": {"reward_timeout_s": 5.0, "workers": 2, "memory_mb": 1024},
    }


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "train.jsonl"
    rows = [{"question": f"What is {i} * 2?", "answer": f"#### {2 * i}"} for i in range(1, 9)]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


@pytest.fixture(autouse=True)
def no_plugins(monkeypatch):
    """Skip loading the installed plugins (slow); the env name is simply not registered."""
    from arena_core import plugin_loader as plugins

    monkeypatch.setattr(plugins, "_PLUGINS", plugins.PluginSet())


def test_good_reward_and_dataset_pass(fixtures, data):
    report = validate_before_run(cfg_for(str(fixtures / "hostile_rewards" / "good.py"), data))
    assert report.verdict == "PASS", report.summary()
    names = [c.name for c in report.checks]
    assert "dataset.columns" in names and "reward.gold_vs_garbage" in names


def test_failing_reward_stops_the_run(fixtures, data):
    cfg = cfg_for(str(fixtures / "hostile_rewards" / "garbage_beats_gold.py"), data)
    with pytest.raises(ValidationFailed) as info:
        validate_before_run(cfg)
    assert isinstance(info.value, ArenaError)
    assert "reward.gold_vs_garbage" in str(info.value)


def test_missing_dataset_path_fails(fixtures, tmp_path):
    cfg = cfg_for(str(fixtures / "hostile_rewards" / "good.py"), str(tmp_path / "missing.jsonl"))
    assert preflight_report(cfg).verdict == "FAIL"

"""`arena validate reward FILE sandbox.reward_timeout_s=S` times each call out after S seconds, as
training does (it used to keep its own 5 s whatever the config said); `--timeout` still wins."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from arena_core.cli import cmd_validate

SLOW = """
import time


def reward(question, answer, completion):
    time.sleep(0.15)
    return 1.0 if answer.split("####")[-1].strip() in completion else 0.0
"""


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, dict]]:
    """(exit code, checks by name) of `arena validate reward ... --samples 1 --json`."""
    parser = argparse.ArgumentParser(prog="arena")
    cmd_validate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["validate", "reward", *argv, "--samples", "1", "--json"])
    code = args.func(args)
    report = json.loads(capsys.readouterr().out)
    return code, {c["name"]: c for c in report["checks"]}


@pytest.fixture
def slow_reward(tmp_path: Path) -> str:
    path = tmp_path / "slow_reward.py"
    path.write_text(SLOW)
    return str(path)


def test_a_slow_reward_fails_at_the_configured_small_timeout(slow_reward, capsys) -> None:
    code, checks = _validate(capsys, slow_reward, "sandbox.reward_timeout_s=0.05")
    assert code == 1
    assert checks["timeouts"]["status"] == "FAIL"
    assert "did not return within 0.05 s" in checks["timeouts"]["detail"]


def test_the_same_reward_passes_at_a_configured_large_timeout(slow_reward, capsys) -> None:
    code, checks = _validate(capsys, slow_reward, "sandbox.reward_timeout_s=30")
    assert code == 0
    assert checks["timeouts"]["status"] == "PASS"
    assert checks["timeouts"]["detail"] == "every call returned within 30 s"


def test_an_explicit_timeout_flag_wins_over_the_config(slow_reward, capsys) -> None:
    code, checks = _validate(
        capsys, slow_reward, "sandbox.reward_timeout_s=30", "--timeout", "0.05"
    )
    assert code == 1 and checks["timeouts"]["status"] == "FAIL"

"""A GRPO run whose reward never varies on the starting model's own samples says so before it
trains (`reward.base_samples`, a pre-flight WARN naming the fix), through `arena-run`'s main():
every group would be flat and the run would log "trained on nothing" at each step otherwise."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.cli.run import main

SMALL = [
    "+experiment=quickstart",
    "train.max_steps=1",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "eval.num_prompts=4",
    "sandbox.workers=1",
    "logger.names=[csv]",
]


# right answers score 1; a wrong one 0.5 when its length is odd: varies on any model's samples
VARYING = """
def reward(question: str, answer: str, completion: str) -> float:
    if answer.split("####")[-1].strip() in completion:
        return 1.0
    return 0.5 if len(completion) % 2 else 0.0
"""


def _run(tmp_runs: Path, tmp_path: Path, capsys, *args: str) -> tuple[str, dict]:
    assert main([*SMALL, *args, f"paths.runs={tmp_runs}"]) == 0
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).replace("│", " ").split())
    (run,) = [p for p in tmp_runs.iterdir() if p.is_dir()]
    checks = json.loads((run / "validation.json").read_text())["checks"]
    return text, {c["name"]: c for c in checks}


def test_a_reward_flat_on_the_base_models_samples_warns_with_the_fix(
    tmp_runs: Path, tmp_path: Path, capsys
) -> None:
    # sampled at temperature 50 the tiny model writes noise: the GSM8K reward scores it all 0
    text, checks = _run(tmp_runs, tmp_path, capsys, "generation.temperature=50")
    check = checks["reward.base_samples"]
    assert check["status"] == "WARN"
    assert "the base model's 8 samples" in check["detail"] and "all scored 0" in check["detail"]
    assert "would be flat" in check["detail"] and "model.init_from" in check["detail"]
    assert "reward.base_samples" in text and "WARN" in text


def test_a_reward_that_varies_passes_and_the_check_can_be_turned_off(
    tmp_runs: Path, tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    reward = tmp_path / "my_reward.py"
    reward.write_text(VARYING)
    _, checks = _run(tmp_runs, tmp_path, capsys, f"reward={reward}", "generation.temperature=50")
    assert checks["reward.base_samples"]["status"] == "PASS"

    monkeypatch.setenv("ARENA_PREFLIGHT_SAMPLE_PROMPTS", "0")
    runs = tmp_path / "off"
    runs.mkdir()
    _, checks = _run(runs, tmp_path, capsys, "generation.temperature=50")
    assert "reward.base_samples" not in checks

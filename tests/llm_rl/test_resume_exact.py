"""Resume is exact: 2 steps, then a resume for 1 more, equals 3 uninterrupted steps."""

from __future__ import annotations

import csv

import pytest
import torch
from safetensors.torch import load_file

from arena_core.errors import ConfigError
from arena_core.llm_rl.recipe import run_training

# A reward with signal in every group (distinct characters), so every step updates the weights:
# with the digits task's 0/1 reward a random model never scores and nothing would be compared.
VARIETY_REWARD = """
def reward(question, answer, completion):
    return len(set(completion)) / 8.0
"""


def _timing(key: str) -> bool:
    """Wall-clock columns differ between any two runs; all others are functions of the seed."""
    return key.startswith(("time/", "tokens_per_s/")) or key.endswith(("seconds", "_s"))


def _rows(run_dir) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    return [{k: v for k, v in r.items() if not _timing(k)} for r in rows]


@pytest.fixture
def config(tmp_path, run_config):
    reward = tmp_path / "variety.py"
    reward.write_text(VARIETY_REWARD)

    def make(where, **train):
        cfg = run_config(where, **train)
        cfg["reward"] = str(reward)
        return cfg

    return make


def _weights(run_dir, step: int) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / f"checkpoints/step_{step:06d}/model/model.safetensors"))


def test_two_steps_then_resume_one_equals_three_straight(
    tmp_path, digits_env, config, one_torch_thread
) -> None:
    straight = run_training(config(tmp_path / "a", max_steps=3))
    split = run_training(config(tmp_path / "b", max_steps=2))
    resumed = run_training(config(tmp_path / "b", max_steps=3, resume=str(split)))
    assert resumed == split
    a, b = _weights(straight, 3), _weights(split, 3)
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), key
    rows = _rows(split)
    assert _rows(straight) == rows
    assert [r["step"] for r in rows] == ["1", "2", "3"]
    assert all(float(r["groups/kept"]) > 0 and r["loss"] != "nan" for r in rows)  # it learned


def test_resume_refuses_a_changed_config_unless_allowed(
    tmp_path, digits_env, run_config, capsys, one_torch_thread
) -> None:
    run_dir = run_training(run_config(tmp_path, max_steps=1))
    changed = run_config(tmp_path, max_steps=2, resume=str(run_dir))
    changed["algo"]["lr"] = 5e-3
    changed["generation"]["temperature"] = 0.7
    with pytest.raises(ConfigError) as info:
        run_training(changed)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert "algo.lr: 0.001 -> 0.005" in message
    assert "generation.temperature: 1.0 -> 0.7" in message
    assert "train.resume_allow_changes=true" in message
    assert "train.max_steps" not in message  # extending a run is what resuming is for
    changed["train"]["resume_allow_changes"] = True
    capsys.readouterr()
    assert run_training(changed) == run_dir
    assert "algo.lr: 0.001 -> 0.005" in capsys.readouterr().out

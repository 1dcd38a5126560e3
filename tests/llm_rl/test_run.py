"""End to end: short runs of the real loop on the embedded tiny model (random init)."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from arena_core.llm_rl.groups import GroupCollector
from arena_core.llm_rl.recipe import run_training
from arena_core.session import RunInterrupted

REQUIRED_COLUMNS = {
    "step",
    "reward/mean",
    "reward/std",
    "loss",
    "kl",
    "clip_frac",
    "tokens/generated",
    "tokens/trained",
    "groups/dropped_zero_adv",
    "time/generate_s",
    "time/learn_s",
    "tokens_per_s/generated",
    "tokens_per_s/trained",
    "eval/reward_mean",
    "eval/accuracy",
}
SUMMARY_KEYS = {
    "eval_reward_initial",
    "eval_reward_final",
    "eval_accuracy_initial",
    "eval_accuracy_final",
    "wall_seconds",
}


def _check_run_dir(run_dir, steps: int) -> dict:
    for name in (
        "config.yaml",
        "metrics.csv",
        "reward_curve.png",
        "summary.json",
        "checkpoints/index.json",
    ):
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["step"]) for r in rows] == list(range(1, steps + 1))
    assert REQUIRED_COLUMNS <= set(rows[0])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["steps"] == steps
    return summary


def test_full_finetune_run_writes_every_artifact(tmp_path, digits_env, capsys, run_config) -> None:
    from transformers import AutoModelForCausalLM

    run_dir = run_training(run_config(tmp_path))
    assert f"run directory: {run_dir}" in capsys.readouterr().out
    summary = _check_run_dir(run_dir, 2)
    assert len(summary["evals"]) == 3  # initial, step 1, final
    ckpt = run_dir / "checkpoints" / "step_000002" / "model"
    model = AutoModelForCausalLM.from_pretrained(ckpt)
    assert model.config.model_type == "qwen2"


def test_lora_cispo_run_resumes_and_loads_with_peft(tmp_path, digits_env, run_config) -> None:
    from peft import PeftModel

    from arena_core.models import build_tiny

    cispo = {"name": "cispo", "group_size": 4, "lr": 1e-3, "beta": 0.01}  # + LoRA reference
    run_dir = run_training(run_config(tmp_path, lora_r=4, algo=cispo))
    _check_run_dir(run_dir, 2)
    ckpt = run_dir / "checkpoints" / "step_000002"
    peft_model = PeftModel.from_pretrained(build_tiny("arena:tiny-init")[0], ckpt / "adapter")
    assert any("lora_" in n for n, _ in peft_model.named_parameters())
    state = json.loads((ckpt / "state.json").read_text())
    resumed = run_training(run_config(tmp_path, lora_r=4, algo=cispo, max_steps=3, resume="latest"))
    assert resumed == run_dir
    summary = _check_run_dir(run_dir, 3)
    assert summary["eval_reward_initial"] == state["evals"][0]["eval/reward_mean"]
    index = json.loads((run_dir / "checkpoints" / "index.json").read_text())
    assert [c["step"] for c in index["checkpoints"]] == [1, 2, 3]


def test_ctrl_c_keeps_a_checkpoint_and_summary(
    tmp_path, digits_env, monkeypatch, run_config
) -> None:
    real = GroupCollector.collect
    calls = {"n": 0}

    def collect(self, n, step):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(self, n, step)

    monkeypatch.setattr(GroupCollector, "collect", collect)
    with pytest.raises(RunInterrupted) as info:
        run_training(run_config(tmp_path, max_steps=5, checkpoint_every=0))
    assert info.value.exit_code == 130
    run_dir = next((tmp_path / "runs").iterdir())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["steps"] == 1
    assert (run_dir / "checkpoints" / "step_000001" / "model" / "model.safetensors").is_file()
    assert torch.load(run_dir / "checkpoints/step_000001/optimizer.pt", weights_only=True)


def test_bad_reward_fails_before_the_model_loads(
    tmp_path, digits_env, monkeypatch, run_config
) -> None:
    from arena_core.errors import ArenaError

    bad = tmp_path / "bad.py"
    bad.write_text("def reward(q, a, c)\n    return 1.0\n")
    loaded = []
    monkeypatch.setattr("arena_core.models.load_policy", lambda *a, **k: loaded.append(1))
    cfg = run_config(tmp_path)
    cfg["reward"] = str(bad)
    with pytest.raises(ArenaError, match="bad.py"):
        run_training(cfg)
    assert not loaded and not (tmp_path / "runs").exists()

"""Atomic writes, the checkpoint index, and restoring model, optimizer and RNG state."""

from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen2Config, Qwen2ForCausalLM

from arena_core.config.resume import resolve_resume
from arena_core.errors import ArenaError
from arena_core.store.atomic import atomic_write_json, atomic_write_text
from arena_core.store.checkpoints import (
    latest_checkpoint,
    load_checkpoint,
    read_index,
    save_checkpoint,
)
from arena_core.store.curves import plot_reward_curve
from arena_core.store.metrics import MetricsWriter, read_metrics
from arena_core.store.rundir import new_run_dir


def _model(seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=32,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=1,
            tie_word_embeddings=True,
        )
    )


def _train_once(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    loss = model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss
    loss.backward()
    opt.step()
    opt.zero_grad()


def test_atomic_write_replaces_and_leaves_no_temp_files(tmp_path) -> None:
    target = tmp_path / "a" / "x.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_text(target, '{"a": 2}')
    assert json.loads(target.read_text()) == {"a": 2}
    assert os.listdir(target.parent) == ["x.json"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path) -> None:
    target = tmp_path / "x.json"
    atomic_write_json(target, {"ok": True})
    with pytest.raises(TypeError):
        atomic_write_json(target, {"bad": object()})
    assert json.loads(target.read_text()) == {"ok": True}
    assert os.listdir(tmp_path) == ["x.json"]


def test_checkpoint_index_retention_and_resume_state(tmp_path) -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in (1, 2, 3):
        _train_once(model, opt)
        random.seed(step)
        save_checkpoint(tmp_path, step, model, opt, {"data_position": 10 * step}, keep=2)
    index = read_index(tmp_path)
    assert [c["step"] for c in index["checkpoints"]] == [2, 3]
    assert index["latest"] == "step_000003"
    names = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert names == ["index.json", "step_000002", "step_000003"]  # no temp dir left behind
    expected_py, expected_torch = random.random(), torch.rand(3)
    expected_np = np.random.rand()
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    saved_opt = opt.state_dict()["state"][0]["exp_avg"].clone()

    fresh = _model(seed=1)
    fresh_opt = torch.optim.AdamW(fresh.parameters(), lr=1e-2)
    random.seed(99)
    state = load_checkpoint(latest_checkpoint(tmp_path), fresh, fresh_opt)
    assert state["step"] == 3 and state["data_position"] == 30
    for k, v in fresh.state_dict().items():
        torch.testing.assert_close(v, saved[k])
    torch.testing.assert_close(fresh_opt.state_dict()["state"][0]["exp_avg"], saved_opt)
    assert random.random() == expected_py  # RNGs continue where the checkpoint left them
    torch.testing.assert_close(torch.rand(3), expected_torch)
    assert np.random.rand() == expected_np
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "checkpoints/step_000003/model")
    torch.testing.assert_close(loaded.state_dict()["model.norm.weight"], saved["model.norm.weight"])


def test_lora_checkpoint_is_peft_format(tmp_path) -> None:
    from peft import LoraConfig, PeftModel, get_peft_model

    model = get_peft_model(_model(), LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj"]))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-1)
    _train_once(model, opt)
    ckpt = save_checkpoint(tmp_path, 1, model, opt, {})
    restored = PeftModel.from_pretrained(_model(), ckpt / "adapter")
    x = torch.tensor([[1, 2, 3]])
    torch.testing.assert_close(restored(x).logits, model(x).logits)
    with pytest.raises(ArenaError, match="LoRA"):
        load_checkpoint(ckpt, _model(), None)


def test_resolve_resume_latest_and_errors(tmp_path) -> None:
    with pytest.raises(ArenaError, match="no run with a checkpoint"):
        resolve_resume("latest", tmp_path)
    run = new_run_dir(tmp_path, "grpo/x y")
    assert run.name.startswith("grpo-x-y-")
    with pytest.raises(ArenaError, match="not a run directory"):
        resolve_resume(str(run), tmp_path)
    model = _model()
    save_checkpoint(run, 1, model, torch.optim.AdamW(model.parameters()), {})
    assert resolve_resume("latest", tmp_path) == run


def test_metrics_csv_fixed_columns_truncate_on_resume_and_plot(tmp_path) -> None:
    writer = MetricsWriter(tmp_path, tensorboard=True)
    writer.log(1, {"reward/mean": 0.5, "eval/reward_mean": None})
    writer.log(2, {"reward/mean": 0.7, "late": 1.0, "eval/reward_mean": 0.9})
    writer.log(3, {"reward/mean": 0.8})
    writer.close()
    rows = read_metrics(tmp_path)
    assert list(rows[0]) == ["step", "reward/mean", "eval/reward_mean"]
    assert [r["eval/reward_mean"] for r in rows] == ["", "0.9", ""]
    assert any((tmp_path / "tensorboard").iterdir())
    MetricsWriter(tmp_path, tensorboard=False, resume_step=2).close()
    assert [r["step"] for r in read_metrics(tmp_path)] == ["1", "2"]
    assert plot_reward_curve(tmp_path).stat().st_size > 1000

"""Loading the teacher of on-policy distillation: frozen, LoRA merged, and only with the student's
vocabulary."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from arena_core.errors import ModelLoadError
from arena_core.models import build_tiny_tokenizer, load_policy, save_policy
from arena_core.models.teacher import TeacherMismatchError, load_teacher


def test_a_teacher_with_another_vocabulary_is_refused_clearly(qwen2_dir: Path) -> None:
    with pytest.raises(TeacherMismatchError) as err:
        load_teacher(str(qwen2_dir), student_tokenizer=build_tiny_tokenizer())
    msg = str(err.value)
    assert f"algo.teacher={qwen2_dir} has a different vocabulary" in msg
    assert "share one tokenizer" in msg and "is in only one of them" in msg


def test_a_lora_teacher_is_merged_frozen_and_in_eval_mode(tmp_path: Path) -> None:
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 4, "alpha": 8}})
    with torch.no_grad():  # a non-zero adapter, so merging it changes the weights
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.01)
    save_policy(policy, tmp_path / "adapter")
    teacher = load_teacher(str(tmp_path / "adapter"), student_tokenizer=build_tiny_tokenizer())
    assert not hasattr(teacher, "disable_adapter")  # a plain model: the adapter folded in
    assert not teacher.training
    assert not any(p.requires_grad for p in teacher.parameters())
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.no_grad():
        assert torch.allclose(teacher(ids).logits, policy.model(ids).logits, atol=1e-5)


def test_a_teacher_that_is_neither_run_nor_model_names_both_attempts(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError) as err:
        load_teacher("no-such-run-or-model", runs=tmp_path)
    msg = str(err.value)
    assert "neither a run nor a model" in msg and "as a run:" in msg and "as a model:" in msg
    with pytest.raises(ModelLoadError, match=r"algo\.teacher=nope:best: no run 'nope'"):
        load_teacher("nope:best", runs=tmp_path)

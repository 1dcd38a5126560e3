"""Checkpoints are durable (files and directories fsynced before the rename), run-directory files
share one mode, and the resume helpers say what is wrong."""

from __future__ import annotations

import os
import stat

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from arena_core.config.resume import resolve_resume
from arena_core.errors import ConfigError
from arena_core.store import atomic, rundir
from arena_core.store.atomic import atomic_write_json, file_mode
from arena_core.store.checkpoints import save_checkpoint
from arena_core.store.index import best_checkpoint_entry
from arena_core.store.rundir import config_changes


def _model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return Qwen2ForCausalLM(cfg)


def test_checkpoint_files_and_directories_are_fsynced_before_the_rename(
    tmp_path, monkeypatch
) -> None:
    synced: list[str] = []
    renamed_at: dict[str, int] = {}  # destination -> how many fsyncs had happened by then
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def replace(src, dst) -> None:
        if os.path.isdir(src):  # the checkpoint directory's rename: all of it must be on disk
            inside = [os.path.join(d, f) for d, _, fs in os.walk(src) for f in fs]
            assert inside and set(inside) <= set(synced), set(inside) - set(synced)
            assert str(src) in synced  # the directory entry itself
        renamed_at[str(dst)] = len(synced)
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    model = _model()
    final = save_checkpoint(tmp_path, 3, model, torch.optim.AdamW(model.parameters()), {"a": 1})
    assert str(final) in renamed_at  # renamed into place, after the checks above
    root = str(rundir.checkpoints_dir(tmp_path))
    assert root in synced[renamed_at[str(final)] :]  # then the parent directory is fsynced
    modes = {stat.S_IMODE(p.stat().st_mode) for p in final.rglob("*") if p.is_file()}
    assert modes == {file_mode()}  # safetensors' 0600 normalised like every other file


def test_atomic_writes_get_the_ordinary_file_mode(tmp_path) -> None:
    atomic_write_json(tmp_path / "a.json", {"x": 1})
    with open(tmp_path / "b.txt", "w") as fh:
        fh.write("plain")
    mode = {stat.S_IMODE((tmp_path / n).stat().st_mode) for n in ("a.json", "b.txt")}
    assert mode == {atomic.file_mode()}


def test_resume_target_that_does_not_exist_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_resume(str(tmp_path / "gone"), tmp_path)
    assert info.value.exit_code == 2 and "does not exist" in str(info.value)


def test_config_changes_ignore_what_a_resume_may_change() -> None:
    old = {"train": {"max_steps": 10, "resume": None}, "algo": {"lr": 1e-5}, "runtime": {}}
    new = {
        "train": {"max_steps": 20, "resume": "runs/x", "resume_allow_changes": False},
        "algo": {"lr": 2e-5, "beta": 0.1},
        "runtime": {"progress": "lines"},
    }
    assert config_changes(old, new) == ["algo.beta: (unset) -> 0.1", "algo.lr: 1e-05 -> 2e-05"]


def test_best_checkpoint_is_the_highest_held_out_reward(tmp_path) -> None:
    model = _model()
    opt = torch.optim.AdamW(model.parameters())
    assert best_checkpoint_entry(tmp_path) is None
    for step, score in ((1, 0.2), (2, 0.9), (3, 0.5)):
        save_checkpoint(tmp_path, step, model, opt, {}, scores={"eval/reward_mean": score})
    save_checkpoint(tmp_path, 4, model, opt, {})  # not evaluated: never "best"
    best = best_checkpoint_entry(tmp_path)
    assert best["step"] == 2 and best["path"].endswith("step_000002")

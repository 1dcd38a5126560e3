"""A full disk: a checkpoint that does not fit fails with a clear error naming the path, the space
needed and the space free, and the previous checkpoint and index stay intact and loadable.

On a real small filesystem: a tmpfs mounted for the test (root in a sandbox that allows mount;
skipped, with the reason, where mounting is not permitted).
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from arena_core.llm_rl.recipe import run_training
from arena_core.models import load_policy
from arena_core.store.atomic import read_json
from arena_core.store.checkpoints import (
    checkpoint_problems,
    latest_checkpoint,
    load_checkpoint,
    read_index,
    save_checkpoint,
)
from arena_core.store.space import DiskFull, model_bytes

MiB = 1 << 20
VARIETY_REWARD = """
def reward(question, answer, completion):
    return len(set(completion)) / 8.0
"""


def _mount(where: Path, size: int, *, remount: bool = False) -> subprocess.CompletedProcess:
    opts = f"remount,size={size}" if remount else f"size={size}"
    cmd = ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Callable[[int], Path]]:
    """`small_fs(bytes)` -> a directory on a tmpfs of that size (unmounted afterwards)."""
    mounted: list[Path] = []

    def make(size: int) -> Path:
        where = tmp_path / f"fs{len(mounted)}"
        where.mkdir()
        try:
            done = _mount(where, size)
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"cannot mount a small tmpfs here: {exc}")
        if done.returncode != 0:
            pytest.skip(f"mounting a small tmpfs is not permitted here: {done.stderr.strip()}")
        mounted.append(where)
        return where

    yield make
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=30)


def _needed_numbers(message: str) -> tuple[int, int]:
    """(needed, free) bytes as the error states them."""
    m = re.search(r"needs about .*?\((\d+) bytes\), .*?\((\d+) bytes\) free", message)
    assert m, message
    return int(m.group(1)), int(m.group(2))


def _intact(run_dir: Path, step: int, model: torch.nn.Module) -> None:
    """The index names checkpoint `step` as the latest, agrees with the disk, and it loads."""
    assert read_index(run_dir)["latest"] == f"step_{step:06d}"
    assert checkpoint_problems(run_dir) == ([], [])  # no half-written leftover either
    assert load_checkpoint(latest_checkpoint(run_dir), model, None)["step"] == step


def test_a_run_out_of_disk_fails_clearly_and_resumes_once_space_is_freed(
    tmp_path, small_fs, digits_env, run_config, one_torch_thread
) -> None:
    """Full fine-tuning on a disk with room for one checkpoint (~39 MB: weights + Adam state)
    and a half: step 2's save is refused before a byte is written; once the disk is made
    bigger (a remount, as a user would free space) the run resumes from step 1 and finishes."""
    policy = load_policy({"name_or_path": "arena:tiny-init"}, device="cpu", runs=str(tmp_path))
    one = 3 * model_bytes(policy.model, trainable_only=False) + MiB  # weights + Adam's two
    runs = small_fs(int(1.5 * one))
    reward = tmp_path / "variety.py"
    reward.write_text(VARIETY_REWARD)  # every group informative: step 1 fills Adam's state
    cfg = run_config(tmp_path, max_steps=3, keep_checkpoints=1)
    cfg.update(reward=str(reward), paths={"runs": str(runs)})
    cfg["eval"]["every"] = 0
    with pytest.raises(DiskFull) as info:
        run_training(cfg)
    message = str(info.value)
    run_dir = next(runs.iterdir())
    assert f"checkpoint step_000002 at {run_dir / 'checkpoints' / 'step_000002'}" in message
    needed, free = _needed_numbers(message)
    assert free < needed and needed >= one - MiB
    assert "previous checkpoint" in message and "train.resume=" in message
    assert read_json(run_dir / "summary.json")["status"] == "failed"
    _intact(run_dir, 1, policy.model)

    assert _mount(runs, 4 * one, remount=True).returncode == 0
    cfg["train"]["resume"] = str(run_dir)
    assert run_training(cfg) == run_dir
    summary = read_json(run_dir / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 3
    _intact(run_dir, 3, policy.model)


def _fill_up(directory: Path) -> None:
    """Write zeros into `directory` until its disk is full (another process, say)."""
    chunk = b"\0" * (64 << 10)
    with open(directory / "filler.bin", "wb") as fh:
        try:
            while True:
                fh.write(chunk)
                fh.flush()
        except OSError:
            pass


class _DiskFillingTokenizer:
    """Saved just before the optimizer state: stands in for whatever else fills the disk then."""

    def save_pretrained(self, directory: str) -> None:
        _fill_up(Path(directory))


def _check_refused(info: pytest.ExceptionInfo, run_dir: Path, model: torch.nn.Module) -> None:
    message = str(info.value)
    assert str(run_dir / "checkpoints" / "step_000002") in message
    assert "No space left on device" in message
    _needed_numbers(message)
    _intact(run_dir, 1, model)
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["index.json", "step_000001"]  # the partial files are gone


def test_running_out_of_space_mid_write_keeps_the_previous_checkpoint(tmp_path, small_fs) -> None:
    """The size check passed (the estimate was short, or something else filled the disk
    meanwhile): the real ENOSPC, whichever writer meets it (safetensors, torch.save), becomes
    the same clear error, the partial files are removed and the index still names the previous
    checkpoint, whole."""
    lora = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    policy = load_policy(
        {"name_or_path": "arena:tiny-init", "lora": lora}, device="cpu", runs=str(tmp_path)
    )
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-3)
    run_dir = small_fs(4 * MiB)
    save_checkpoint(run_dir, 1, policy.model, optimizer, {"data_position": 2})

    def members(tmp: Path) -> None:  # a population's members, more than the disk has left
        save_file({"w": torch.zeros(2 * MiB)}, str(tmp / "members.safetensors"))

    with pytest.raises(DiskFull) as info:  # safetensors meets the full disk
        save_checkpoint(run_dir, 2, policy.model, optimizer, {}, extra=members)
    _check_refused(info, run_dir, policy.model)

    # the size is known up front: refused before writing anything
    with pytest.raises(DiskFull) as info:
        save_checkpoint(run_dir, 2, policy.model, optimizer, {}, extra=members, extra_bytes=8 * MiB)
    needed, free = _needed_numbers(str(info.value))
    assert needed > 8 * MiB > free
    _intact(run_dir, 1, policy.model)

    full = load_policy({"name_or_path": "arena:tiny-init"}, device="cpu", runs=str(tmp_path))
    optimizer = torch.optim.AdamW(full.model.parameters(), lr=1e-3)
    run_dir = small_fs(3 * model_bytes(full.model, trainable_only=False))
    save_checkpoint(run_dir, 1, full.model, optimizer, {})
    with pytest.raises(DiskFull) as info:  # torch.save of the optimizer meets the full disk
        save_checkpoint(run_dir, 2, full.model, optimizer, {}, tokenizer=_DiskFillingTokenizer())
    _check_refused(info, run_dir, full.model)

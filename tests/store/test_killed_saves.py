"""What a save killed half-way leaves behind: never named by the index, removed by the next save,
and told apart from a real problem (an indexed checkpoint with a file missing)."""

from __future__ import annotations

from pathlib import Path

import torch

from arena_core.models import load_policy
from arena_core.store.checkpoints import checkpoint_problems, read_index, save_checkpoint


def test_a_killed_save_leaves_nothing_the_index_names_and_the_next_save_tidies(
    tmp_path: Path,
) -> None:
    lora = {"r": 2, "alpha": 4, "target_modules": ["q_proj"]}
    policy = load_policy(
        {"name_or_path": "arena:tiny-init", "lora": lora}, device="cpu", runs=str(tmp_path)
    )
    optimizer = torch.optim.AdamW([p for p in policy.model.parameters() if p.requires_grad])
    run = tmp_path / "run"
    save_checkpoint(run, 1, policy.model, optimizer, {"data_position": 2})
    root = run / "checkpoints"
    # a SIGKILL mid-write (a .tmp dir), and one between the rename and the index update
    (root / ".tmp-step_000002-4242" / "adapter").mkdir(parents=True)
    (root / "step_000003").mkdir()
    assert checkpoint_problems(run) == ([], [".tmp-step_000002-4242", "step_000003"])
    assert read_index(run)["latest"] == "step_000001"

    save_checkpoint(run, 2, policy.model, optimizer, {"data_position": 4})
    assert checkpoint_problems(run) == ([], [])
    assert sorted(p.name for p in root.iterdir()) == ["index.json", "step_000001", "step_000002"]

    (root / "step_000002" / "optimizer.pt").unlink()  # damage the index cannot explain
    problems, _ = checkpoint_problems(run)
    assert problems == [f"{root / 'step_000002' / 'optimizer.pt'} is missing"]

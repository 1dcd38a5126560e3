"""`arena.train(["train.resume=NAME"])` resumes as `arena-run train.resume=NAME` does: the run
continues with its own saved config (no preset, algorithm or model repeated), takes the overrides
that cannot change what it learns (`train.max_steps` upward) and refuses the others by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import arena
from arena_core.errors import ArenaError

TWO_STEPS = [
    "+experiment=quickstart",
    "model=tiny",
    "train.max_steps=2",
    "train.checkpoint_every=1",
    "train.prompts_per_step=2",
    "algo.group_size=2",
    "eval.num_prompts=4",
    "generation.max_new_tokens=8",
    "sandbox.workers=1",
    "runtime.threads=1",
    "runtime.progress=lines",
    "run_name=resumable",
]


def test_sdk_resume_by_name_is_one_call(tmp_runs: Path) -> None:
    first = arena.train([*TWO_STEPS, f"paths.runs={tmp_runs}"], check=False)
    assert json.loads((first.path / "summary.json").read_text())["steps"] == 2

    where = f"paths.runs={tmp_runs}"
    with pytest.raises(ArenaError, match="algo.lr"):  # would change the objective: refused
        arena.train(["train.resume=resumable", "algo.lr=0.5", where])

    resumed = arena.train(["train.resume=resumable", "train.max_steps=3", where], check=False)
    assert resumed.path == first.path
    summary = json.loads((resumed.path / "summary.json").read_text())
    assert (summary["status"], summary["steps"]) == ("finished", 3)

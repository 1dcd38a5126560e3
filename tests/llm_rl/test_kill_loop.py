"""Resume loses nothing under SIGKILL: bench/kill_loop.py with small counts.

`arena-run` (a child process, as a user starts it) is killed with SIGKILL at a seeded random
moment while it trains, then resumed with `train.resume=RUN`: after each kill the index agrees
with the files and the latest checkpoint loads; at the end the run drew exactly the examples an
uninterrupted run drew, step by step (none skipped, none repeated), bit-exactly in sync mode and
within the staleness bound in async mode. The full counts (20 kills over six cells) are the
bench's: `python bench/kill_loop.py`.
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _kill_loop():
    """bench/kill_loop.py as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("kill_loop", ROOT / "bench" / "kill_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize(
    ("cell", "kills", "steps"),
    [("sync-full-single", 2, 4), ("async-lora-single", 1, 3), ("sync-lora-population", 1, 3)],
)
def test_sigkill_then_resume_trains_the_same_prompts(
    cell, kills, steps, tmp_path, no_leftover_children, one_torch_thread
) -> None:
    kl = _kill_loop()
    record = kl.run_cell(cell, kills, steps, random.Random(7), tmp_path, in_process=True)
    print(json.dumps({cell: record}))  # the tally line
    # a kill landed while it trained (a later one can come too late: the run finished first)
    assert record["kills"] >= 1 and record["kills"] + record["finished_before_kill"] >= kills
    n = record["kills"]
    assert record["index_ok"] == n  # after every kill: the index names whole checkpoints
    assert record["loaded"] == n - record["before_first_checkpoint"]
    assert record["final_index_ok"]  # and what a killed save left is gone after the resume
    assert record["orphans"] == 0  # no child process (reward sandbox) outlived a kill
    assert record["steps"] == steps and record["rows_equal_count"]
    assert record["prompt_exact"], record  # the same examples, step by step
    if "population" not in cell:
        assert record["contiguous"]  # none skipped, none repeated
    if cell.startswith("sync"):
        assert record["bit_exact"] and record["weights_equal"], record
    else:
        assert record["staleness_ok"], record


def test_a_run_killed_after_its_last_checkpoint_is_finished_by_the_resume(
    tmp_path, digits_env, run_config, capsys, one_torch_thread
) -> None:
    """What a SIGKILL between the final checkpoint and summary.json leaves (the kill loop found
    it): a resume trains no step, but writes the summary, and removes the half-deleted older
    checkpoint the kill left; before, it said "already finished" and left the run incomplete."""
    from arena_core.llm_rl.recipe import run_training
    from arena_core.store.checkpoints import checkpoint_problems

    cfg = run_config(tmp_path, max_steps=1)
    cfg["eval"]["every"] = 0
    run_dir = run_training(cfg)
    (run_dir / "summary.json").unlink()
    (run_dir / "checkpoints" / "step_000000" / "model").mkdir(parents=True)  # a prune cut short
    rows = (run_dir / "metrics.csv").read_text()
    capsys.readouterr()
    assert run_training({**cfg, "train": {**cfg["train"], "resume": str(run_dir)}}) == run_dir
    assert "before its summary: finishing it" in capsys.readouterr().out
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 1
    assert (run_dir / "metrics.csv").read_text() == rows  # no step trained again
    assert checkpoint_problems(run_dir) == ([], [])

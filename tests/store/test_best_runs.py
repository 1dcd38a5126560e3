"""A real quickstart run through `arena-run`: the best evaluation is the best checkpoint
everywhere, also when it falls between scheduled saves (SFT and DPO: tests/sft_dpo/test_sft_dpo_best.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.cli.main import main as arena
from arena_core.cli.run import main as arena_run
from arena_core.serve.dashboard.data import run_row
from arena_core.serve.dashboard.pages import runs_page
from arena_core.store import index
from arena_core.store.checkpoints import read_index
from arena_core.store.curves import reward_curve_figure

QUIET = ["runtime.progress=off", "logger.names=[csv]", "runtime.threads=1", "sandbox.workers=1"]


def _only_run(runs: Path, name: str) -> Path:
    (run,) = [p for p in runs.iterdir() if p.name.startswith(f"{name}-")]
    return run


@pytest.mark.slow
def test_quickstart_best_evaluation_is_the_best_checkpoint_everywhere(
    tmp_runs: Path, capsys
) -> None:
    """Checkpoints are due at step 2 (and the end, 3); a high learning rate peaks at step 1 and
    then breaks the policy, so the best evaluation falls between saves. It keeps its weights,
    and RUN:best, `arena checkpoints best`, `arena runs list`, the dashboard and the reward curve
    all name step 1."""
    argv = ["+experiment=quickstart", f"paths.runs={tmp_runs}", *QUIET]
    argv += ["train.max_steps=3", "train.checkpoint_every=2", "train.prompts_per_step=2"]
    argv += ["algo.group_size=4", "algo.lr=3e-3", "eval.every=1", "eval.num_prompts=8"]
    assert arena_run(argv) == 0
    run = _only_run(tmp_runs, "quickstart")
    summary = json.loads((run / "summary.json").read_text())
    trained = [e for e in summary["evals"] if e["step"] > 0]
    best_eval = max(trained, key=lambda e: e["eval/reward_mean"])  # first of equal ones
    assert best_eval["step"] == 1, summary["evals"]  # the premise: not a save step
    assert best_eval["eval/reward_mean"] > max(e["eval/reward_mean"] for e in trained[1:])

    entries = read_index(run)["checkpoints"]
    assert [(c["step"], c.get("best_only", False)) for c in entries] == [
        (1, True),  # kept because it beat every earlier evaluation
        (2, False),
        (3, False),
    ]
    assert summary["best_checkpoint"]["step"] == 1
    capsys.readouterr()
    assert arena(["checkpoints", "best", "quickstart", "--runs", str(tmp_runs)]) == 0
    reward = best_eval["eval/reward_mean"]
    assert capsys.readouterr().out.startswith(f"step 1  eval/reward_mean={reward:.4f}")
    assert index.select_checkpoint("quickstart:best", tmp_runs)[1].step == 1
    assert arena(["runs", "list", "--runs", str(tmp_runs), "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert (row["best_step"], row["best_eval"], row["best_metric"]) == (
        1,
        reward,
        "eval/reward_mean",
    )
    page = runs_page([run_row(index.read_run(run))], {}, None, tmp_runs)
    assert f"{reward:.3g} reward @ 1" in page  # the dashboard's runs table
    fig = reward_curve_figure(run, summary["evals"])  # as the loop draws reward_curve.png
    notes = [t.get_text() for t in fig.axes[0].texts]
    assert notes == [f"best {reward:.3g} @ 1"]  # the reward curve marks the same evaluation

"""A run's figures are redrawn at every save from what the checkpoint and metrics.csv hold: one
that cannot be drawn is a warning, and the save, the summary and the run go on. The case that
made this matter: a SIGTERM that lands while matplotlib is first imported leaves it half-imported,
and the interrupted run's last save draws again."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

import arena
from arena_core.population.plot import plot_population

SHORT = [
    "+experiment=quickstart",
    "train.max_steps=2",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.every=1",
    "eval.num_prompts=4",
    "train.checkpoint_every=1",
    "sandbox.workers=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]


@pytest.fixture
def half_imported_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    """matplotlib as an interrupted first import leaves it: in sys.modules, without its API."""
    monkeypatch.setitem(sys.modules, "matplotlib", types.ModuleType("matplotlib"))


def test_a_run_whose_curve_cannot_be_drawn_still_saves_and_finishes(
    tmp_runs: Path, half_imported_matplotlib: None, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = arena.train([*SHORT, f"paths.runs={tmp_runs}"], check=False).path
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 2
    assert Path(summary["final_checkpoint"]).is_dir()
    assert not (run_dir / "reward_curve.png").exists()
    err = capsys.readouterr().err
    assert "reward_curve.png not drawn (AttributeError" in err and "checkpoint and metrics" in err


def test_a_population_figure_that_cannot_be_drawn_is_a_warning(
    tmp_path: Path, half_imported_matplotlib: None, capsys: pytest.CaptureFixture[str]
) -> None:
    lineage = {"members": [{"id": 0, "fitness": [[1, 0.5]], "hyperparameters": {"lr": 1e-3}}]}
    assert plot_population(tmp_path, lineage, title="pop") is None
    assert not (tmp_path / "population.png").exists()
    assert "population.png not drawn" in capsys.readouterr().err

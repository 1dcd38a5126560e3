"""RLOO, REINFORCE++ and the DAPO options through real runs: `arena-run +experiment=quickstart
algo=NAME` on the embedded tiny model, sync and async, with the metrics that show each fired."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from arena_core.cli.run import main as arena_run

SMALL = [
    "+experiment=quickstart",
    "train.max_steps=2",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=off",
]


def _run(tmp_runs: Path, *overrides: str) -> tuple[list[dict], dict]:
    assert arena_run([*SMALL, *overrides, f"paths.runs={tmp_runs}"]) == 0
    (run_dir,) = tmp_runs.iterdir()
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    return rows, json.loads((run_dir / "summary.json").read_text())


def _trained(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["train/flat_step"] == "0"]


@pytest.mark.slow
def test_reinforce_pp_async_with_kl_in_the_reward(tmp_runs: Path) -> None:
    """beta > 0: the learner computes reference logprobs and REINFORCE++ puts the k1 KL into the
    per-token rewards (logged as `kl`); the async runtime collects its groups."""
    rows, summary = _run(
        tmp_runs,
        "algo=reinforce_pp",
        "algo.beta=0.01",
        "algo.baseline=none",
        "runtime.mode=async",
        "generation.max_new_tokens=24",
    )
    assert summary["status"] == "finished" and len(rows) == 2
    trained = _trained(rows)
    assert trained and all(math.isfinite(float(r["kl"])) for r in trained)
    assert all(math.isfinite(float(r["loss"])) for r in trained)


@pytest.mark.slow
def test_rloo_with_dapo_overlong_shaping_and_masking(tmp_runs: Path) -> None:
    """algo=rloo with DAPO's options on (they live on every group-relative config) and batch-std
    scaling: max_new_tokens 14 with a 4-token buffer, so long completions lose reward
    (reward/overlong) and the truncated ones get no loss (samples/masked_truncated)."""
    rows, summary = _run(
        tmp_runs,
        "algo=rloo",
        "generation.max_new_tokens=14",
        "algo.overlong_buffer=4",
        "algo.mask_truncated=true",
        "algo.scale_rewards=batch",
    )
    assert summary["status"] == "finished" and len(rows) == 2
    assert any(float(r["reward/overlong"]) < 0 for r in rows)
    assert sum(float(r["samples/masked_truncated"]) for r in rows) > 0
    trained = _trained(rows)
    assert trained
    for r in trained:
        assert math.isfinite(float(r["loss"])) and abs(float(r["loss"])) < 50  # no ~0 std blow-up
        assert float(r["tokens/trained"]) > 0

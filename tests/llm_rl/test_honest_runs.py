"""Runs say honestly how they went: a run that trained on nothing warns (closing summary,
summary.json, `arena runs show`, the dashboard) with what to try; weights that blow up end the run
with an error naming the step, not the sampler's traceback; a run that fails before its first
step leaves a directory marked failed with the error."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import httpx
import pytest

import arena
from arena_core.cli.main import main as arena_main
from arena_core.cli.run import main as arena_run
from arena_core.errors import ArenaError

TINY_LLM = [
    "+experiment=quickstart",
    "train.max_steps=2",
    "train.prompts_per_step=2",
    "algo.group_size=4",
    "generation.max_new_tokens=8",
    "eval.num_prompts=4",
    "train.checkpoint_every=0",
    "sandbox.workers=1",
    "runtime.threads=1",
    "logger.names=[csv]",
    "runtime.progress=lines",
]
ZERO_REWARD = "def reward(question, answer, completion):\n    return 0.0\n"


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def _page(runs: Path, name: str) -> str:
    from arena_core.serve.dashboard.server import DashboardServer

    server = DashboardServer(runs, port=0).start()
    try:
        return httpx.get(f"{server.url}/runs/{name}").text
    finally:
        server.close()


def test_greedy_sampling_is_named_as_the_cause_of_flat_groups(
    tmp_runs: Path, tmp_path: Path, capsys
) -> None:
    """generation.temperature=0: every completion of a group is the same, so every group is
    flat whatever the reward. The note, the progress line and the closing warning say that (not
    'the reward never varies'), and a flat step's loss is shown as no update, not nan."""
    run = arena.train(
        [*TINY_LLM, "generation.temperature=0", f"paths.runs={tmp_runs}"], check=False
    )
    out = capsys.readouterr().out
    (warning,) = _summary(run.path)["warnings"]
    assert (
        "The likely cause: generation.temperature=0 samples the same completion"
        in (warning["message"])
    )
    assert warning["fix"].startswith("sample: generation.temperature=1.0")
    assert "step 1 trained on nothing" in out and "generation.temperature=0 samples one" in out
    assert "loss -  (flat: no update)" in out and "loss nan" not in out


def test_a_run_that_trained_on_nothing_says_so(tmp_runs: Path, tmp_path: Path, capsys) -> None:
    """A reward that is always 0 (arena-run's pre-flight refuses it; the SDK without `check`
    trains on it, as a run whose policy never earns the reward does): every group is flat."""
    reward = tmp_path / "zero.py"
    reward.write_text(ZERO_REWARD)
    run = arena.train([*TINY_LLM, f"reward={reward}", f"paths.runs={tmp_runs}"], check=False)
    out = capsys.readouterr().out
    summary = _summary(run.path)
    assert summary["status"] == "finished"
    (warning,) = summary["warnings"]
    assert warning["code"] == "trained_on_nothing"
    assert "trained on nothing for all 2 steps" in warning["message"]
    assert "eval_samples_final" in warning["message"]  # where to look
    assert "warm start" in warning["fix"] and "partial credit" in warning["fix"]
    # the closing summary and the first flat step's note say it too
    assert "warning: the run trained on nothing for all 2 steps" in out
    assert "try: start from a model that already produces the answer format" in out
    assert "step 1 trained on nothing" in out
    rows = list(csv.DictReader((run.path / "metrics.csv").open()))
    assert [r["train/flat_step"] for r in rows] == ["1", "1"]
    # refilling stopped after train.max_flat_rounds=2 flat rounds, not max_sampling_rounds=4
    assert [r["sampling/rounds"] for r in rows] == ["2", "2"]

    assert arena_main(["runs", "show", str(run.path)]) == 0
    shown = capsys.readouterr().out
    assert "warning: the run trained on nothing for all 2 steps" in shown and "try: " in shown
    page = _page(tmp_runs, run.path.name)
    assert 'id="run-warnings"' in page and "trained on nothing for all 2 steps" in page


def test_max_flat_rounds_zero_keeps_refilling(tmp_runs: Path, tmp_path: Path) -> None:
    reward = tmp_path / "zero.py"
    reward.write_text(ZERO_REWARD)
    overrides = [*TINY_LLM, "train.max_steps=1", "train.max_flat_rounds=0", f"reward={reward}"]
    run = arena.train([*overrides, f"paths.runs={tmp_runs}"], check=False)
    (row,) = csv.DictReader((run.path / "metrics.csv").open())
    assert row["sampling/rounds"] == "4" and row["train/flat_step"] == "1"


def test_blown_up_weights_end_the_run_naming_the_step(tmp_runs: Path, capsys) -> None:
    """algo.lr=1e30: the first update makes the weights unusable; the run stops at that step
    with an error naming it (not the sampler's "probability tensor contains inf, nan" later)."""
    code = arena_run(
        [*TINY_LLM, "algo.max_grad_norm=1.0", "algo.lr=1e30", f"paths.runs={tmp_runs}"]
    )
    err = capsys.readouterr().err
    assert code == 1
    failed = re.search(r"error: step (\d+) failed: the update blew up the weights", err)
    assert failed, err
    assert "lower algo.lr" in err and "probability tensor" not in err
    assert "Traceback" not in err
    (run_dir,) = tmp_runs.iterdir()
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    step = int(failed.group(1))
    # the first step that updated the weights: every earlier one was flat (no update ran)
    assert len(rows) == step - 1 and all(r["train/flat_step"] == "1" for r in rows)
    (run_dir,) = tmp_runs.iterdir()
    summary = _summary(run_dir)
    assert summary["status"] == "failed" and summary["error"].startswith(f"step {step}: ")
    assert summary["final_checkpoint"] is None  # the blown-up weights were not saved
    assert not (run_dir / "checkpoints").exists() or not any(
        (run_dir / "checkpoints").glob("step_*")
    )

    assert arena_main(["runs", "show", str(run_dir)]) == 0
    shown = capsys.readouterr().out
    assert "status failed" in shown and f"error: step {step}: the update blew up" in shown
    page = _page(tmp_runs, run_dir.name)
    assert 'id="run-error"' in page and "the update blew up the weights" in page


def test_blown_up_weights_in_ppo_and_sft_name_the_step(tmp_path: Path) -> None:
    """The same check after PPO's and SFT's updates (through the SDK, which runs their loops)."""
    data = tmp_path / "sft.jsonl"
    rows = [
        {"prompt": f"What is {a} + 2?", "response": f"<answer>{a + 2}</answer>"} for a in range(20)
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = ["algo.lr=1e30", "logger.names=[csv]", "runtime.progress=off", "train.max_steps=3"]
    cases = {
        "ppo": [
            "+algo=ppo",
            "+env=gym",
            "env.id=CartPole-v1",
            "env.num_envs=2",
            "algo.num_steps=16",
        ],
        "sft": ["+algo=sft", "+env=dataset", f"env.path={data}", "env.eval_size=4", "model=tiny"],
    }
    for name, overrides in cases.items():
        runs = tmp_path / name
        with pytest.raises(ArenaError, match="step 1: the update blew up the weights"):
            arena.train([*overrides, *common, f"paths.runs={runs}"], check=False)
        (run_dir,) = runs.iterdir()
        summary = _summary(run_dir)
        assert summary["status"] == "failed" and summary["error"].startswith("step 1: "), name
        assert summary["final_checkpoint"] is None, name


def test_a_run_that_fails_before_its_first_step_is_marked_failed(tmp_runs: Path) -> None:
    """A bad model.init_from: the run directory says failed, with the error, at step 0."""
    with pytest.raises(ArenaError, match="model.init_from=no-such-run"):
        arena.train(
            [*TINY_LLM, "model.init_from=no-such-run:best", f"paths.runs={tmp_runs}"], check=False
        )
    (run_dir,) = tmp_runs.iterdir()
    summary = _summary(run_dir)
    assert summary["status"] == "failed" and summary["steps"] == 0
    assert "model.init_from=no-such-run" in summary["error"]
    assert not (run_dir / "checkpoints").exists()


def test_a_bad_init_from_stops_the_launch_before_a_run_directory_is_made(
    tmp_runs: Path, capsys
) -> None:
    """With the pre-flight (arena-run's default), the checkpoint model.init_from names is
    resolved before anything is written: a typo leaves no failed run behind."""
    from arena_core.cli.run import main

    assert main([*TINY_LLM, "model.init_from=no-such-run:best", f"paths.runs={tmp_runs}"]) == 1
    assert (
        "FAIL model.available: model.init_from=no-such-run:best: no run" in capsys.readouterr().err
    )
    assert not tmp_runs.exists() or not list(tmp_runs.iterdir())


def test_warnings_follow_the_counts() -> None:
    """A few flat steps in a long run are normal (no warning); a quarter or more warn; a tool
    env whose policy never called a tool warns with its own fix."""
    from arena_core.llm_rl.run_warnings import count_step, run_warnings

    totals: dict[str, float] = {}
    for flat in [1, 0, 0, 0, 0, 0, 0, 0]:
        count_step(totals, {"train/flat_step": flat, "tools/episodes": 8, "tools/calls": 0})
    (tools,) = run_warnings(totals)  # 1 of 8 flat: below a quarter
    assert tools["code"] == "no_tool_calls" and "64 training episodes" in tools["message"]
    assert "tools_warmstart" in tools["fix"]
    count_step(totals, {"train/flat_step": 1, "tools/episodes": 8, "tools/calls": 3})
    count_step(totals, {"train/flat_step": 1})
    (flat,) = run_warnings(totals, unit="member steps")  # 3 of 10; calls were made
    assert flat["code"] == "trained_on_nothing"
    assert "for 3 of 10 member steps" in flat["message"]

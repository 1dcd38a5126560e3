"""IPPO through the real loop on a PettingZoo parallel env where agents die and join."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from arena_core.classic_rl.marl_policies import agent_groups
from arena_core.classic_rl.policy import load_gym_policy

from .conftest import ENVS, train
from .envs import LineWalkers

ARGS = [
    "+algo=ippo",
    "+env=pettingzoo",
    f"env.id={ENVS}:LineWalkers",
    "env.num_envs=2",
    "algo.num_steps=32",
    "eval.episodes=4",
    "algo.lr=1e-3",
]


def test_agent_groups_follow_names_and_spaces() -> None:
    env = LineWalkers()
    assert agent_groups("w", env, "prefix") == {
        "walker_0": "walker",
        "walker_1": "walker",
        "late_0": "late",
    }
    assert agent_groups("w", env, "agent") == {a: a for a in env.possible_agents}
    assert set(agent_groups("w", env, "all").values()) == {"all"}


def test_ippo_learns_with_agents_dying_and_joining(tmp_path: Path) -> None:
    run_dir = train(tmp_path, *ARGS, "train.max_steps=24", "eval.every=12")
    summary = json.loads((run_dir / "summary.json").read_text())
    # random walkers rarely arrive (about -0.2 per agent); trained ones walk straight there
    assert summary["eval_return_mean_final"] > summary["eval_return_mean_initial"] + 0.5
    agents = summary["eval_agent_returns_final"]
    assert set(agents) == {"walker_0", "walker_1", "late_0"} and agents["late_0"] > 0.3
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {"return/walker_0", "return/late_0", "loss/policy/walker", "loss/policy/late"} <= set(
        rows[0]
    )
    # one network per group, usable for serving with the agent's name
    act = load_gym_policy(run_dir)
    assert act([0.0, 1.0, 0.0], agent="late_0") in (0, 1, 2)
    assert set(act.spec["nets"]) == {"walker", "late"}


def test_separate_networks_per_agent(tmp_path: Path) -> None:
    run_dir = train(tmp_path, *ARGS, "train.max_steps=1", "algo.share_parameters=false")
    spec = json.loads((run_dir / "checkpoints/step_000001/model/arena_policy.json").read_text())
    assert set(spec["nets"]) == {"walker_0", "walker_1", "late_0"}


def test_nan_observation_ends_the_episode_not_the_run(tmp_path: Path) -> None:
    run_dir = train(tmp_path, *ARGS, "train.max_steps=2", "+env.kwargs.nan_every=5")
    summary = json.loads((run_dir / "summary.json").read_text())
    # each of the 2 envs steps 2 updates x 32 times: a NaN on every 5th step, 12 per env
    assert summary["nan_observations"] == 24 and summary["steps"] == 2


def test_ippo_resumes(tmp_path: Path) -> None:
    run_dir = train(tmp_path, *ARGS, "train.max_steps=2", "train.checkpoint_every=1")
    train(
        tmp_path, *ARGS, "train.max_steps=3", "train.checkpoint_every=1", f"train.resume={run_dir}"
    )
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["env_steps"] == 3 * 2 * 32
    with open(run_dir / "metrics.csv") as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [1, 2, 3]

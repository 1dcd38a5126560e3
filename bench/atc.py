"""Air-traffic control (plugins/arena-atc): a random policy, the "head straight to the exit"
baseline and PPO trained by `arena-run +experiment=atc`, on the same evaluation episodes.

The trained policy is the run's final checkpoint, loaded with `load_gym_policy` (what serving
uses) and played deterministically; all three play `--episodes` episodes seeded from 50,000, which
no training or in-run evaluation episode uses. Also reported: separation losses (pair-steps
closer than the minimum) and exits reached per episode, and the training time.

Needs `pip install -e plugins/arena-atc`. Usage: python bench/atc.py [--steps 300] [--episodes 200]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SEED0 = 50_000


def play(policy: Callable[[Any, np.ndarray], Any], episodes: int) -> dict[str, float]:
    from arena_atc.env import AirTrafficEnv

    env = AirTrafficEnv()
    env.action_space.seed(0)
    returns, losses, exits = [], [], []
    for k in range(episodes):
        obs, _ = env.reset(seed=SEED0 + k)
        total, done, info = 0.0, False, {}
        while not done:
            obs, reward, term, trunc, info = env.step(policy(env, obs))
            total += reward
            done = term or trunc
        returns.append(total)
        losses.append(info["separation_losses"])
        exits.append(info["exits"])
    return {
        "return_mean": round(statistics.fmean(returns), 2),
        "return_std": round(statistics.pstdev(returns), 2),
        "separation_losses": round(statistics.fmean(losses), 3),
        "exits": round(statistics.fmean(exits), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=None, help="train.max_steps (default: preset)")
    parser.add_argument("--episodes", type=int, default=200)
    args = parser.parse_args()
    from arena_atc.env import heading_to_exit

    from arena_core.classic_rl.policy import load_gym_policy
    from arena_core.classic_rl.ppo import PPORecipe
    from arena_core.config import compose_config
    from arena_core.session.recipe import RunInputs

    random = play(lambda env, obs: env.action_space.sample(), args.episodes)
    print(f"random: {random}", flush=True)
    baseline = play(lambda env, obs: heading_to_exit(env), args.episodes)
    print(f"baseline: {baseline}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        overrides = ["+experiment=atc", f"paths.runs={tmp}", "logger.names=[csv]"]
        if args.steps:
            overrides.append(f"train.max_steps={args.steps}")
        overrides.append("runtime.progress=lines")
        run_dir = PPORecipe().run(RunInputs.of(compose_config(overrides)))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        act = load_gym_policy(run_dir)
        trained = play(lambda env, obs: np.asarray(act(obs)), args.episodes)
    print(f"trained: {trained}", flush=True)
    print(
        json.dumps(
            {
                "bench": "atc",
                "episodes": args.episodes,
                "env_steps": summary["env_steps"],
                "train_seconds": round(summary["train_seconds"], 1),
                "random_return": random["return_mean"],
                "baseline_return": baseline["return_mean"],
                "trained_return": trained["return_mean"],
                "trained_minus_baseline": round(
                    trained["return_mean"] - baseline["return_mean"], 2
                ),
                "random": random,
                "baseline": baseline,
                "trained": trained,
            }
        )
    )


if __name__ == "__main__":
    main()

"""IPPO on MPE's simple_spread (the `mpe2` package): return before and after training, against a
random policy on the same evaluation episodes.

Three agents share one network (`algo.share_parameters=true`) and must cover three landmarks
without colliding; discrete actions, 25-step episodes. The trained policy is the run's final
checkpoint played deterministically through `load_gym_policy`; the random policy samples each
agent's action space. Both play `--episodes` episodes seeded from 50,000. Reported returns are
per agent, averaged over agents and episodes (simple_spread's reward is mostly shared).

Needs `pip install mpe2` (it pulls pygame-ce). Usage: python bench/ippo.py [--steps 300] [--lr 2.5e-4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

SEED0 = 50_000
ENV_ID = "mpe2.simple_spread_v3"


def play(policy: Callable[[str, Any, Any], Any], episodes: int) -> float:
    from mpe2 import simple_spread_v3

    env = simple_spread_v3.parallel_env(continuous_actions=False)
    returns = []
    for k in range(episodes):
        obs, _ = env.reset(seed=SEED0 + k)
        for agent in env.possible_agents:
            env.action_space(agent).seed(SEED0 + k)
        total = dict.fromkeys(env.possible_agents, 0.0)
        while env.agents:
            obs, rewards, _, _, _ = env.step({a: policy(a, obs[a], env) for a in env.agents})
            for a, r in rewards.items():
                total[a] += float(r)
        returns.append(statistics.fmean(total.values()))
    env.close()
    return round(statistics.fmean(returns), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=300, help="train.max_steps (updates)")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--lr", type=float, default=2.5e-4)
    args = parser.parse_args()
    from arena_core.classic_rl.ippo import IPPORecipe
    from arena_core.classic_rl.policy import load_gym_policy
    from arena_core.config import compose_config
    from arena_core.session.recipe import RunInputs

    random = play(lambda agent, obs, env: env.action_space(agent).sample(), args.episodes)
    print(f"random: {random}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        cfg = compose_config(
            [
                "+algo=ippo",
                "+env=pettingzoo",
                f"env.id={ENV_ID}",
                "+env.kwargs.continuous_actions=false",
                "env.num_envs=4",
                "algo.num_steps=100",
                f"algo.lr={args.lr}",
                "algo.ent_coef=0.01",
                f"train.max_steps={args.steps}",
                "train.checkpoint_every=0",
                f"eval.every={max(1, args.steps // 5)}",
                "eval.episodes=20",
                f"paths.runs={tmp}",
                "logger.names=[csv]",
                "runtime.progress=lines",
                f"train.log_every={max(1, args.steps // 10)}",
            ]
        )
        run_dir = IPPORecipe().run(RunInputs.of(cfg))
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
        act = load_gym_policy(run_dir)
        trained = play(lambda agent, obs, env: act(obs, agent=agent), args.episodes)
    print(f"trained: {trained}", flush=True)
    print(
        json.dumps(
            {
                "bench": "ippo",
                "env": ENV_ID,
                "episodes": args.episodes,
                "env_steps": summary["env_steps"],
                "train_seconds": round(summary["train_seconds"], 1),
                "random_return": random,
                "trained_return": trained,
                "eval_return_mean_initial": round(summary["eval_return_mean_initial"], 2),
                "eval_return_mean_final": round(summary["eval_return_mean_final"], 2),
                "gain_over_random": round(trained - random, 2),
            }
        )
    )


if __name__ == "__main__":
    main()

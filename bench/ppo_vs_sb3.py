"""Arena's PPO against Stable-Baselines3's on CartPole-v1: same hyperparameters, same env steps.

Both use rl-zoo's CartPole recipe (8 envs x 32 steps, one 256-sample minibatch x 20 epochs,
lr 1e-3 linearly annealed, gamma 0.98, GAE 0.8, clip 0.2, no entropy bonus, vf 0.5, grad
norm 0.5, 64-64 tanh actor and critic, advantage normalisation, no value clipping,
time-limit truncations bootstrapped) for 390 updates = 99,840 env steps, with one torch thread
each. Every 20 updates both play 10 deterministic episodes on their own seeded CartPole
(`seed + 1_000_000 + k`); the clock excludes those evaluations. Runs are interleaved per seed
(Arena, SB3, Arena, SB3...), so a busy machine slows both alike.

Reported per library: wall time until the mean evaluation return first reaches 475 (null when
it never does; the ratio then uses the full training time as a lower bound, flagged), and the
final evaluation return, averaged over seeds. Goal: ratio_time_to_475 <= 0.5. The same ratios
in CPU time (`time.process_time`, one thread each) are reported too: on a shared machine the
wall clock of a 10-second run moves with other processes' load, the CPU time much less.

Needs `pip install stable-baselines3` (a benchmark-only dependency, never Arena's).
Usage: python bench/ppo_vs_sb3.py [--seeds 3] [--updates 390]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

TARGET = 475.0
N_ENVS, N_STEPS, EVERY, EPISODES = 8, 32, 20, 10
HP = {"lr": 1e-3, "gamma": 0.98, "gae": 0.8, "epochs": 20, "clip": 0.2}


def run_arena(seed: int, updates: int, runs: Path) -> dict:
    from arena_core.classic_rl.ppo import PPORecipe
    from arena_core.config import compose_config
    from arena_core.session.recipe import RunInputs

    cfg = compose_config(
        [
            "+experiment=cartpole",
            f"seed={seed}",
            f"train.max_steps={updates}",
            f"eval.every={EVERY}",
            f"eval.episodes={EPISODES}",
            "algo.clip_vloss=false",  # SB3 does not clip the value loss by default
            "algo.threads=1",
            "train.checkpoint_every=0",
            f"paths.runs={runs}",
            "logger.names=[csv]",
            "runtime.progress=off",
        ]
    )
    run_dir = PPORecipe().run(RunInputs.of(cfg))
    evals = json.loads((run_dir / "summary.json").read_text())["evals"]
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    phases = {
        "rollout_s": sum(float(r["time/rollout_s"]) for r in rows),
        "learn_s": sum(float(r["time/learn_s"]) for r in rows),
    }
    spent, spent_cpu, curve = 0.0, 0.0, []
    for e in evals:
        curve.append(
            (
                e["env_steps"],
                e["eval/return_mean"],
                e["elapsed_s"] - spent,
                e["cpu_elapsed_s"] - spent_cpu,
            )
        )
        spent += e["eval/seconds"]
        spent_cpu += e["eval/cpu_seconds"]
    return {**_result(curve[1:]), **phases}  # the step-0 evaluation is before training


def run_sb3(seed: int, updates: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    torch.set_num_threads(1)
    eval_env = gym.make("CartPole-v1")

    class Evaluate(BaseCallback):
        def __init__(self) -> None:
            super().__init__()
            self.rollouts, self.eval_s, self.curve, self.t0 = 0, 0.0, [], time.perf_counter()
            self.eval_cpu, self.c0 = 0.0, time.process_time()
            self.rollout_s = self.learn_s = 0.0
            self.mark: float | None = None  # when the last rollout ended

        def _on_step(self) -> bool:
            return True

        def _on_rollout_end(self) -> None:
            self.mark = time.perf_counter()
            self.rollout_s += self.mark - self.started

        def _on_rollout_start(self) -> None:
            # called before each rollout after the first: the previous update has finished
            if self.mark is not None:
                self.learn_s += time.perf_counter() - self.mark
            if self.rollouts and self.rollouts % EVERY == 0:
                self._evaluate()
            self.rollouts += 1
            self.started = time.perf_counter()

        def _evaluate(self) -> None:
            t, c = time.perf_counter(), time.process_time()
            returns = []
            for k in range(EPISODES):
                obs, _ = eval_env.reset(seed=seed + 1_000_000 + k)
                done, total = False, 0.0
                while not done:
                    action, _ = self.model.predict(obs, deterministic=True)
                    obs, r, term, trunc, _ = eval_env.step(int(action))
                    total += float(r)
                    done = term or trunc
                returns.append(total)
            elapsed, cpu = t - self.t0 - self.eval_s, c - self.c0 - self.eval_cpu
            self.curve.append((self.num_timesteps, float(np.mean(returns)), elapsed, cpu))
            self.eval_s += time.perf_counter() - t
            self.eval_cpu += time.process_time() - c

    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=seed)
    model = PPO(
        "MlpPolicy",
        env,
        n_steps=N_STEPS,
        batch_size=N_ENVS * N_STEPS,
        n_epochs=HP["epochs"],
        learning_rate=lambda progress: HP["lr"] * progress,
        gamma=HP["gamma"],
        gae_lambda=HP["gae"],
        clip_range=HP["clip"],
        ent_coef=0.0,
        vf_coef=0.5,
        max_grad_norm=0.5,
        policy_kwargs={"net_arch": {"pi": [64, 64], "vf": [64, 64]}},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    callback = Evaluate()
    model.learn(total_timesteps=updates * N_ENVS * N_STEPS, callback=callback)
    callback.learn_s += time.perf_counter() - (callback.mark or time.perf_counter())
    callback._evaluate()  # after the last update
    return {**_result(callback.curve), "rollout_s": callback.rollout_s, "learn_s": callback.learn_s}


def _result(curve: list[tuple[int, float, float, float]]) -> dict:
    reached = next(((t, c) for _, ret, t, c in curve if ret >= TARGET), (None, None))
    return {
        "time_to_475_s": reached[0],
        "cpu_to_475_s": reached[1],
        "train_s": curve[-1][2],
        "train_cpu_s": curve[-1][3],
        "return_final": curve[-1][1],
        "curve": [(s, round(r, 1), round(t, 2)) for s, r, t, _ in curve],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=390)
    args = parser.parse_args()
    arena, sb3 = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(args.seeds):
            arena.append(run_arena(seed, args.updates, Path(tmp)))
            sb3.append(run_sb3(seed, args.updates))
            for name, res in (("arena", arena[-1]), ("sb3", sb3[-1])):
                print(
                    f"seed {seed} {name}: time to {TARGET:.0f} {res['time_to_475_s']}, "
                    f"final {res['return_final']:.1f}, train {res['train_s']:.1f}s",
                    flush=True,
                )

    def time_to(results: list[dict], key: str = "time_to_475_s") -> tuple[float, bool]:
        total = "train_s" if key == "time_to_475_s" else "train_cpu_s"
        times = [r[key] or r[total] for r in results]
        return statistics.fmean(times), all(r[key] is not None for r in results)

    a_time, a_all = time_to(arena)
    s_time, s_all = time_to(sb3)
    a_cpu, _ = time_to(arena, "cpu_to_475_s")
    s_cpu, _ = time_to(sb3, "cpu_to_475_s")
    print(
        json.dumps(
            {
                "bench": "ppo_vs_sb3",
                "env": "CartPole-v1",
                "env_steps": args.updates * N_ENVS * N_STEPS,
                "seeds": args.seeds,
                "ratio_time_to_475": round(a_time / s_time, 3),
                "arena_time_to_475_s": round(a_time, 2),
                "sb3_time_to_475_s": round(s_time, 2),
                # the same in CPU time (one thread each): what a busy machine cannot skew
                "ratio_cpu_time_to_475": round(a_cpu / s_cpu, 3),
                "ratio_cpu_full_training": round(
                    statistics.fmean(r["train_cpu_s"] for r in arena)
                    / statistics.fmean(r["train_cpu_s"] for r in sb3),
                    3,
                ),
                "arena_reached_475_all_seeds": a_all,
                "sb3_reached_475_all_seeds": s_all,
                "arena_return_final": round(statistics.fmean(r["return_final"] for r in arena), 1),
                "sb3_return_final": round(statistics.fmean(r["return_final"] for r in sb3), 1),
                "arena_train_s": round(statistics.fmean(r["train_s"] for r in arena), 2),
                "sb3_train_s": round(statistics.fmean(r["train_s"] for r in sb3), 2),
                # where the time goes: collecting rollouts vs the PPO update (same arithmetic)
                "arena_rollout_s": round(statistics.fmean(r["rollout_s"] for r in arena), 2),
                "sb3_rollout_s": round(statistics.fmean(r["rollout_s"] for r in sb3), 2),
                "arena_update_s": round(statistics.fmean(r["learn_s"] for r in arena), 2),
                "sb3_update_s": round(statistics.fmean(r["learn_s"] for r in sb3), 2),
            }
        )
    )


if __name__ == "__main__":
    main()

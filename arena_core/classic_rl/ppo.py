"""The `ppo` recipe: PPO on a Gymnasium environment, readable top to bottom.

    for step in 1..train.max_steps:            one step = one rollout + one PPO update
        rollout: algo.num_steps x env.num_envs transitions with the current policy
        advantages: GAE over the rollout (truncations bootstrapped from the final observation)
        update: algo.update_epochs passes of algo.num_minibatches minibatches
        every eval.every steps: eval.episodes deterministic episodes on separately seeded envs
        every train.checkpoint_every steps: a checkpoint (resumable with train.resume=RUN_DIR)

`PPORecipe` is what the launcher runs (its `check` is a dry run's look at the env), `run_classic` sets up
(envs, network, optimizer, the run and its restore), `_Loop.run` is the loop above. The pieces
IPPO shares (envs, GAE, nets, the PPO update, evaluation, `GymRun`) stay in `arena_core.classic_rl`;
the step loop itself (endings included) is `ClassicLoop`'s (`classic_rl/loop.py`), shared
with IPPO.
The run directory is the LLM loop's (config.yaml, metrics.csv, TensorBoard, checkpoints/,
summary.json with eval_return_mean/std before and after and wall_seconds). Environments from a
user's file step in sandboxed child processes (envs.py); NaN observations or rewards end the
episode and are counted (`nan/observations`, `nan/rewards`) instead of crashing the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena_core.classic_rl.envs import EnvSource
from arena_core.classic_rl.eval import EVAL_SEED_OFFSET, evaluate
from arena_core.classic_rl.file_env import FileVec
from arena_core.classic_rl.gae import RewardScaler, gae
from arena_core.classic_rl.loop import ClassicLoop, ClassicRecipe
from arena_core.classic_rl.nets import ActorCritic, make_optimizer
from arena_core.classic_rl.run import GymRun
from arena_core.classic_rl.spaces import network_spec
from arena_core.classic_rl.update import annealed_lr, ppo_update
from arena_core.classic_rl.vec import AsyncVec, SyncVec
from arena_core.config.schema import CoreConfig
from arena_core.run_parts.build import build_algorithm
from arena_core.session import seed_everything
from arena_core.session.recipe import RunInputs
from arena_core.store.kinds import network_label


def make_vec(source: EnvSource, num_envs: int, sandbox: dict[str, Any] | None = None) -> Any:
    """PPO's `num_envs` environments: a user's file in sandbox workers (FileVec, JSON only);
    otherwise in this process (SyncVec), or one child per env with `env.vector=async` (AsyncVec,
    trusted code only)."""
    if source.sandboxed:
        return FileVec(source, num_envs, sandbox or {})
    if source.vector == "async":
        return AsyncVec(source, num_envs)
    return SyncVec(source, num_envs)


class PPORecipe(ClassicRecipe):
    """PPO on a Gymnasium env: vector envs, GAE, clipped losses."""

    env_kind = "gymnasium"
    wrong_kind = "a PettingZoo parallel environment: train it with +algo=ippo"

    def check(self, inputs: RunInputs) -> str | None:
        """What a dry run checks: the env builds (sandboxed for a file) and PPO can take its
        spaces (UnsupportedSpaceError otherwise); returns a one-line description."""
        core = inputs.core
        algo = build_algorithm(core.algo, inputs.algo)
        source = self.source(core)
        envs = make_vec(source, 1, core.sandbox.model_dump())
        try:
            network_spec(source.target, envs.observation_space, envs.action_space, algo.config)
            return f"env {source.target}: {envs.observation_space} -> {envs.action_space}"
        finally:
            envs.close()

    def run_classic(self, core: CoreConfig, cfg: dict[str, Any], algo: Any) -> Path:
        c = algo.config
        source = self.source(core)
        envs = make_vec(source, source.num_envs, core.sandbox.model_dump())
        try:  # the spaces are checked before anything else is built or trained
            spec = network_spec(source.target, envs.observation_space, envs.action_space, c)
        except Exception:
            envs.close()
            raise
        eval_envs = make_vec(
            source, min(core.eval.episodes, source.num_envs), core.sandbox.model_dump()
        )
        try:
            seed_everything(core.seed)  # the run session's seeding, before the network exists
            net = ActorCritic(spec)
            optimizer = make_optimizer(net.parameters(), c.lr, c.adam_eps)
            run = GymRun(core, cfg, _label(source.target))
            if run.finished:
                return run.dir
            with run.recorded():  # summary.json says how the run ended, whatever ends it
                run.write_plan(source, c.num_steps, net, policy=network_label(spec))
                state = run.restore(net, optimizer)
                scaler = (
                    RewardScaler(source.num_envs, c.gamma, c.clip_reward) if c.norm_reward else None
                )
                if scaler is not None and "reward_scaler" in state:
                    scaler.load(state["reward_scaler"])
                _Loop(core, algo, net, optimizer, envs, eval_envs, run, scaler).run()
        finally:
            envs.close()
            eval_envs.close()
        return run.dir


def _label(target: str) -> str:
    return target.rpartition(":")[2] or target


class _Loop(ClassicLoop):
    """One PPO run: the steps of the module docstring inside `ClassicLoop.run`."""

    def __init__(self, core, algo, net, optimizer, envs, eval_envs, run, scaler) -> None:  # noqa: ANN001
        super().__init__(core, algo, run)
        self.net, self.optimizer, self.envs, self.eval_envs = net, optimizer, envs, eval_envs
        self.scaler = scaler

    def start_episodes(self, seed: int) -> None:
        self.obs = self.envs.reset(seed)
        self.done = np.zeros(self.envs.num_envs, dtype=np.float32)

    # -- rollout -------------------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: the update's autograd reads these tensors
    def rollout(self) -> dict[str, Any]:
        c, net, envs = self.c, self.net, self.envs
        obs, done = self.obs, self.done
        T, N = c.num_steps, envs.num_envs
        xs, acts, logps, values = [], [], [], []
        rewards = np.zeros((T, N), dtype=np.float32)
        dones = np.zeros((T, N), dtype=np.float32)
        returns: list[float] = []
        lengths: list[int] = []
        nan_obs = nan_rew = 0
        for t in range(T):
            x = net.prepare(torch.as_tensor(obs))
            a, logp, v = net.act(x)
            out = envs.step(net.to_env_action(a))
            if net.norm_obs:
                net.update_obs_stats(out.obs)
            r = out.reward
            if self.scaler is not None:
                r = self.scaler(r, out.terminated | out.truncated)
            if c.bootstrap_truncated and out.final_obs:
                idx = [i for i in out.final_obs if out.truncated[i] and not out.terminated[i]]
                if idx:
                    final = torch.as_tensor(np.stack([out.final_obs[i] for i in idx]))
                    r = r.copy()
                    r[idx] += c.gamma * net.value(net.prepare(final)).numpy()
            xs.append(x)
            acts.append(a)
            logps.append(logp)
            values.append(v)
            rewards[t] = r
            dones[t] = done
            done = (out.terminated | out.truncated).astype(np.float32)
            obs = out.obs
            returns += out.returns
            lengths += out.lengths
            nan_obs += out.nan_obs
            nan_rew += out.nan_reward
        self.env_steps += T * N
        last_value = net.value(net.prepare(torch.as_tensor(obs))).numpy()
        vals = torch.stack(values).numpy()
        adv, ret = gae(rewards, vals, dones, last_value, done, c.gamma, c.gae_lambda)
        rollout = {
            "x": torch.stack(xs).flatten(0, 1),
            "a": torch.stack(acts).flatten(0, 1),
            "logp": torch.stack(logps).flatten(),
            "value": torch.as_tensor(vals).flatten(),
            "adv": torch.as_tensor(adv).flatten(),
            "ret": torch.as_tensor(ret).flatten(),
            "returns": returns,
            "lengths": lengths,
            "nan_obs": nan_obs,
            "nan_rew": nan_rew,
        }
        self.run_.totals["nan_observations"] = self.run_.totals.get("nan_observations", 0) + nan_obs
        self.run_.totals["nan_rewards"] = self.run_.totals.get("nan_rewards", 0) + nan_rew
        self.obs, self.done = obs, done
        return rollout

    # -- update --------------------------------------------------------------------------------
    def update(self, b: dict[str, Any]) -> dict[str, float]:
        lr = annealed_lr(self.c, self.step, self.core.train.max_steps)
        return ppo_update(self.algo, self.net, self.optimizer, b, lr)

    # -- evaluation and checkpoints ---------------------------------------------------------------
    def evaluate(self) -> str:
        t0, c0 = time.perf_counter(), time.process_time()
        episodes = self.core.eval.episodes
        returns = evaluate(self.net, self.eval_envs, episodes, self.core.seed + EVAL_SEED_OFFSET)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        rec = self.run_.add_eval(self.step, self.env_steps, returns, wall, cpu)
        return (
            f"eval @ step {self.step} ({self.env_steps} env steps): return "
            f"{rec['eval/return_mean']:.2f} +- {rec['eval/return_std']:.2f} over {episodes} episodes"
        )

    def checkpoint(self, best_only: bool = False) -> Path:
        extra: dict[str, Any] = {"env_steps": self.env_steps}
        if self.scaler is not None:
            extra["reward_scaler"] = self.scaler.state()
        return self.run_.checkpoint(self.step, self.net, self.optimizer, extra, best_only=best_only)

    def row(self, b: dict[str, Any], learn: dict[str, float], t_roll: float, t_learn: float):  # noqa: ANN201
        return _row(b, learn, self.env_steps, t_roll, t_learn)


def _row(b: dict[str, Any], learn: dict[str, float], env_steps: int, t_roll: float, t_learn: float):  # noqa: ANN202
    returns, lengths = b["returns"], b["lengths"]
    n = len(b["adv"])
    return {
        "env_steps": env_steps,
        "reward/mean": float(np.mean(returns)) if returns else None,
        "episode/length_mean": float(np.mean(lengths)) if lengths else None,
        "episodes": len(returns),
        "loss": learn.get("loss/policy", 0.0) + learn.get("loss/value", 0.0),
        **learn,
        "nan/observations": b["nan_obs"],
        "nan/rewards": b["nan_rew"],
        "time/rollout_s": t_roll,
        "time/learn_s": t_learn,
        "env_steps_per_s": n / (t_roll + t_learn) if t_roll + t_learn > 0 else 0.0,
    }

"""The `ippo` recipe: independent PPO on a PettingZoo parallel environment, top to bottom.

    for step in 1..train.max_steps:
        rollout: algo.num_steps steps of each of env.num_envs parallel envs; every agent in
                 `env.agents` acts through its group's network, and its transitions form its own
                 trajectory (an agent that dies stops it, one that joins starts one)
        advantages: GAE along each agent's trajectory
        update: PPO on each network with the transitions of the agents that use it
        evaluation (deterministic, separately seeded env) and checkpoints as in ppo.py

`IPPORecipe` is what the launcher runs (its `check` builds the env and the networks for a dry
run), `run_classic` sets up, `_Loop.run` is the loop above; the PPO pieces it shares with the `ppo`
recipe stay in `arena_core.classic_rl`, and the step loop with its endings is `ClassicLoop`'s
(`classic_rl/loop.py`).
Metrics: `reward/mean` is the agent-averaged episode return; `return/<agent>` each agent's.
A NaN observation or reward ends that env's episode (counted in `nan/*`), never the run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from arena_core.classic_rl.eval import EVAL_SEED_OFFSET
from arena_core.classic_rl.loop import ClassicLoop, ClassicRecipe
from arena_core.classic_rl.marl_policies import PolicySet, agent_groups
from arena_core.classic_rl.nets import make_optimizer
from arena_core.classic_rl.run import GymRun
from arena_core.classic_rl.update import annealed_lr, ppo_update
from arena_core.config.schema import CoreConfig
from arena_core.errors import ConfigError
from arena_core.run_parts.build import build_algorithm
from arena_core.session import seed_everything
from arena_core.session.recipe import RunInputs
from arena_core.store.kinds import network_label

MAX_EVAL_STEPS = 100_000


class IPPORecipe(ClassicRecipe):
    """Independent PPO on a PettingZoo parallel env."""

    env_kind = "parallel"
    wrong_kind = (
        "a single-agent Gymnasium environment: train it with +algo=ppo (IPPO needs a PettingZoo "
        "parallel env, +env=pettingzoo env.id=...)"
    )

    def check(self, inputs: RunInputs) -> str | None:
        """What a dry run checks: the parallel env builds and IPPO can take every agent's
        spaces; returns a one-line description of the networks."""
        core = inputs.core
        algo = build_algorithm(core.algo, inputs.algo)
        source = self.source(core)
        env = source.make()
        try:
            groups = agent_groups(source.target, env, algo.config.group_by)
            policies = PolicySet.build(source.target, env, groups, algo.config)
            return f"env {source.target}: agents {policies.key_of} (network per key)"
        finally:
            env.close()

    def run_classic(self, core: CoreConfig, cfg: dict[str, Any], algo: Any) -> Path:
        c = algo.config
        if c.norm_reward:
            raise ConfigError(
                "algo.norm_reward: not supported by ippo yet; set algo.norm_reward=false"
            )
        source = self.source(core)
        if source.sandboxed:
            raise ConfigError(
                "env.path: PettingZoo environments from a file are not supported by ippo yet; "
                "install the environment as a package and give env.id=package.module:Class"
            )
        envs = [source.make() for _ in range(source.num_envs)]
        eval_env = source.make()
        try:
            seed_everything(core.seed)  # the run session's seeding, before the networks exist
            groups = agent_groups(source.target, envs[0], c.group_by)
            policies = PolicySet.build(source.target, envs[0], groups, c)
            optimizer = make_optimizer(policies.parameters(), c.lr, c.adam_eps)
            run = GymRun(core, cfg, _label(source.target))
            if run.finished:
                return run.dir
            with run.recorded():  # summary.json says how the run ended, whatever ends it
                run.write_plan(
                    source,
                    c.num_steps,
                    policies,
                    networks=sorted(policies.specs),
                    policy=network_label(*policies.specs.values()),
                )
                run.restore(policies, optimizer)
                _Loop(core, algo, policies, optimizer, envs, eval_env, run).run()
        finally:
            for env in [*envs, eval_env]:
                env.close()
        return run.dir


def _label(target: str) -> str:
    return (target.rpartition(":")[2] or target).rpartition(".")[2]


def _finite(x: Any) -> bool:
    arr = np.asarray(x)
    return not (np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all())


class _Loop(ClassicLoop):
    """One IPPO run: the steps of the module docstring inside `ClassicLoop.run`."""

    def __init__(self, core, algo, policies, optimizer, envs, eval_env, run) -> None:  # noqa: ANN001
        super().__init__(core, algo, run)
        self.policies, self.optimizer = policies, optimizer
        self.envs, self.eval_env = envs, eval_env
        self.agents = list(envs[0].possible_agents)

    def start_episodes(self, seed: int) -> None:
        self.obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        self.ep_ret = [dict.fromkeys(self.agents, 0.0) for _ in self.envs]

    def update(self, rolled: tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]) -> Any:
        lr = annealed_lr(self.c, self.step, self.core.train.max_steps)
        learn: dict[str, float] = {}
        for key, batch in rolled[0].items():
            stats = ppo_update(self.algo, self.policies[key], self.optimizer, batch, lr)
            learn.update({f"{k}/{key}": v for k, v in stats.items() if k != "lr"})
        return learn, lr

    def row(self, rolled: Any, learned: Any, t_roll: float, t_learn: float) -> dict[str, Any]:
        return self._row(rolled[1], learned[0], learned[1], t_roll, t_learn)

    def final_totals(self) -> dict[str, Any]:
        return {
            **super().final_totals(),
            "eval_agent_returns_final": self.run_.evals[-1].get("agents", {}),
        }

    # -- rollout -------------------------------------------------------------------------------
    @torch.no_grad()  # not inference_mode: the update's autograd reads these tensors
    def rollout(self) -> tuple[dict[str, dict[str, torch.Tensor]], dict[str, Any]]:
        c, pol = self.c, self.policies
        trajs: dict[tuple[int, str], list[tuple]] = {}
        finished: list[dict[str, float]] = []
        nan_obs = nan_rew = 0
        for _ in range(c.num_steps):
            acting = [(e, a) for e, obs in enumerate(self.obs) for a in obs]
            outs = pol.act_many(acting, self.obs, update_stats=c.norm_obs)
            for e, env in enumerate(self.envs):
                actions = {a: outs[(e, a)][4] for a in self.obs[e]}
                obs2, rew, term, trunc, _ = env.step(actions)
                bad = any(not _finite(obs2[a]) for a in obs2)
                bad_r = any(not _finite(r) for r in rew.values())
                nan_obs, nan_rew = nan_obs + bad, nan_rew + bad_r
                for a in actions:
                    x, act, logp, v, _ = outs[(e, a)]
                    r = float(rew.get(a, 0.0)) if not (bad or bad_r) else 0.0
                    self.ep_ret[e][a] += r
                    done = bool(term.get(a, False) or trunc.get(a, False)) or bad or bad_r
                    if (
                        c.bootstrap_truncated
                        and trunc.get(a, False)
                        and not term.get(a, False)
                        and not (bad or bad_r)
                        and a in obs2
                    ):
                        r += c.gamma * pol.value(a, obs2[a])
                    trajs.setdefault((e, a), []).append((x, act, logp, v, r, done))
                self.env_steps += 1
                if not env.agents or bad or bad_r:
                    finished.append(dict(self.ep_ret[e]))
                    self.ep_ret[e] = dict.fromkeys(self.agents, 0.0)
                    self.obs[e] = env.reset()[0]
                else:
                    self.obs[e] = {a: obs2[a] for a in env.agents if a in obs2}
        self.run_.totals["nan_observations"] = self.run_.totals.get("nan_observations", 0) + nan_obs
        self.run_.totals["nan_rewards"] = self.run_.totals.get("nan_rewards", 0) + nan_rew
        batches = self._advantages(trajs)
        return batches, {"finished": finished, "nan_obs": nan_obs, "nan_rew": nan_rew}

    def _advantages(self, trajs: dict[tuple[int, str], list[tuple]]) -> dict[str, dict]:
        """GAE along each agent's own trajectory, then the transitions grouped by network."""
        c, pol = self.c, self.policies
        parts: dict[str, list[dict[str, torch.Tensor]]] = {}
        for (e, a), steps in trajs.items():
            rewards = np.array([s[4] for s in steps], dtype=np.float32)
            values = np.array([s[3] for s in steps], dtype=np.float32)
            dones = np.array([s[5] for s in steps], dtype=np.float32)
            alive = not steps[-1][5] and a in self.obs[e]
            last = pol.value(a, self.obs[e][a]) if alive else 0.0
            adv = np.zeros_like(rewards)
            gae = 0.0
            for t in reversed(range(len(steps))):
                nxt = last if t == len(steps) - 1 else values[t + 1]
                nd = 1.0 - dones[t]
                delta = rewards[t] + c.gamma * nxt * nd - values[t]
                gae = delta + c.gamma * c.gae_lambda * nd * gae
                adv[t] = gae
            parts.setdefault(pol.key_of[a], []).append(
                {
                    "x": torch.stack([s[0] for s in steps]),
                    "a": torch.stack([s[1] for s in steps]),
                    "logp": torch.tensor([s[2] for s in steps]),
                    "value": torch.as_tensor(values),
                    "adv": torch.as_tensor(adv),
                    "ret": torch.as_tensor(adv + values),
                }
            )
        return {key: {k: torch.cat([p[k] for p in ps]) for k in ps[0]} for key, ps in parts.items()}

    # -- metrics, evaluation, checkpoints ---------------------------------------------------------
    def _row(self, info: dict, learn: dict, lr: float, t_roll: float, t_learn: float) -> dict:
        finished = info["finished"]
        row: dict[str, Any] = {
            "env_steps": self.env_steps,
            "reward/mean": float(np.mean([np.mean(list(f.values())) for f in finished]))
            if finished
            else None,
            "episodes": len(finished),
        }
        for a in self.agents:
            row[f"return/{a}"] = float(np.mean([f[a] for f in finished])) if finished else None
        row.update({"lr": lr, **learn})
        row.update(
            {
                "nan/observations": info["nan_obs"],
                "nan/rewards": info["nan_rew"],
                "time/rollout_s": t_roll,
                "time/learn_s": t_learn,
            }
        )
        return row

    @torch.inference_mode()
    def evaluate(self) -> str:
        t0 = time.perf_counter()
        per_agent: dict[str, list[float]] = {a: [] for a in self.agents}
        team: list[float] = []
        base = self.core.seed + EVAL_SEED_OFFSET
        for k in range(self.core.eval.episodes):
            obs = self.eval_env.reset(seed=base + k)[0]
            ret = dict.fromkeys(self.agents, 0.0)
            for _ in range(MAX_EVAL_STEPS):
                if not obs:
                    break
                acts = self.policies.act_many([(0, a) for a in obs], [obs], deterministic=True)
                actions = {a: acts[(0, a)][4] for a in obs}
                obs2, rew, _, _, _ = self.eval_env.step(actions)
                if not all(_finite(r) for r in rew.values()):
                    break
                for a, r in rew.items():
                    ret[a] += float(r)
                if not self.eval_env.agents:
                    break
                obs = {a: obs2[a] for a in self.eval_env.agents if a in obs2}
            for a in self.agents:
                per_agent[a].append(ret[a])
            team.append(float(np.mean(list(ret.values()))))
        rec = self.run_.add_eval(self.step, self.env_steps, team, time.perf_counter() - t0)
        rec["agents"] = {a: float(np.mean(v)) for a, v in per_agent.items()}
        return (
            f"eval @ step {self.step} ({self.env_steps} env steps): return "
            f"{rec['eval/return_mean']:.2f} +- {rec['eval/return_std']:.2f} (agent mean) over "
            f"{self.core.eval.episodes} episodes"
        )

    def checkpoint(self, best_only: bool = False) -> Path:
        return self.run_.checkpoint(
            self.step,
            self.policies,
            self.optimizer,
            {"env_steps": self.env_steps},
            best_only=best_only,
        )

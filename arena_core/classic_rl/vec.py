"""Vectorised Gymnasium environments for the on-policy loop, with episode statistics and a NaN
guard built in.

Both flavours reset a finished environment in the same step (the returned observation is the
next episode's first one; the last one is kept in `final_obs` for bootstrapping truncations).
A step whose observation or reward is not finite is counted, its reward zeroed, and the
episode ended and reset without bootstrapping: one bad transition must not crash a run or
poison the value function.

- `SyncVec` steps plain env objects in a Python loop (no info merging, no copies): for small
  envs this is most of PPO's speed.
- `AsyncVec` wraps gymnasium's AsyncVectorEnv (one spawned child per env) with the same
  interface, for installed envs that are slow enough to want their own core.
- A user's env file never runs here: file_env.FileVec steps it in sandbox workers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from arena_core.classic_rl.envs import EnvSource
from arena_core.errors import ArenaError


class EnvStepError(ArenaError):
    """The environment raised or hung while stepping."""


@dataclass
class StepOut:
    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray  # time limits and NaN resets
    final_obs: dict[int, np.ndarray] = field(default_factory=dict)  # to bootstrap truncations
    returns: list[float] = field(default_factory=list)  # episodes finished this step
    lengths: list[int] = field(default_factory=list)
    nan_obs: int = 0
    nan_reward: int = 0


class _Stats:
    """Running return and length of each environment's current episode."""

    def __init__(self, n: int) -> None:
        self.ret = np.zeros(n, dtype=np.float64)
        self.len = np.zeros(n, dtype=np.int64)

    def add(self, reward: np.ndarray, done: np.ndarray, out: StepOut) -> None:
        self.ret += reward
        self.len += 1
        for i in np.flatnonzero(done):
            out.returns.append(float(self.ret[i]))
            out.lengths.append(int(self.len[i]))
            self.ret[i] = 0.0
            self.len[i] = 0


def _finite(x: Any) -> bool:
    if isinstance(x, float | int):
        return math.isfinite(x)
    arr = np.asarray(x)
    return arr.dtype.kind != "f" or bool(np.isfinite(arr).all())


class SyncVec:
    """`num_envs` environments stepped in this process (see module docstring)."""

    def __init__(self, source: EnvSource, num_envs: int) -> None:
        first = source.make()
        if not hasattr(first, "observation_space") or not hasattr(first, "action_space"):
            raise EnvStepError(
                f"environment {source.target} is a {type(first).__name__}, not a Gymnasium env "
                "(no observation_space/action_space): PPO trains Gymnasium envs; a text task "
                "trains with an LLM algorithm such as +algo=grpo"
            )
        self.envs = [first, *(source.make() for _ in range(num_envs - 1))]
        self.num_envs = num_envs
        self.observation_space = first.observation_space
        self.action_space = first.action_space
        self.stats = _Stats(num_envs)
        self._obs: Any = None  # allocated at reset: the spaces are checked first

    def reset(self, seed: int) -> np.ndarray:
        if self._obs is None:
            space = self.observation_space
            self._obs = np.zeros((self.num_envs, *space.shape), dtype=space.dtype)
        for i, env in enumerate(self.envs):
            self._obs[i] = env.reset(seed=seed + i)[0]
        self.stats = _Stats(self.num_envs)
        return self._obs.copy()

    def step(self, actions: np.ndarray) -> StepOut:
        n = self.num_envs
        reward = np.zeros(n, dtype=np.float64)
        term = np.zeros(n, dtype=bool)
        trunc = np.zeros(n, dtype=bool)
        out = StepOut(self._obs, reward, term, trunc)
        for i, env in enumerate(self.envs):
            try:
                o, r, te, tr, _ = env.step(actions[i])
            except Exception as exc:  # noqa: BLE001 - the env's own error, with its env index
                raise EnvStepError(f"env {i}: step() raised {type(exc).__name__}: {exc}") from exc
            bad_r = not _finite(r)
            bad_o = not _finite(o)
            if bad_o or bad_r:
                out.nan_obs += bad_o
                out.nan_reward += bad_r
                r, te, tr = 0.0, False, True
            reward[i] = r
            term[i], trunc[i] = te, tr
            if te or tr:
                if not (bad_o or bad_r):
                    out.final_obs[i] = np.asarray(o)
                o, _ = env.reset()
            self._obs[i] = o
        self.stats.add(reward, term | trunc, out)
        out.obs = self._obs.copy()
        return out

    def close(self) -> None:
        for env in self.envs:
            env.close()


class AsyncVec:
    """gymnasium.vector.AsyncVectorEnv with SyncVec's interface; each env in a spawned child."""

    def __init__(self, source: EnvSource, num_envs: int) -> None:
        from gymnasium.vector import AsyncVectorEnv, AutoresetMode

        self.timeout = source.step_timeout_s
        self.vec = AsyncVectorEnv(
            [source.thunk() for _ in range(num_envs)],
            context="spawn",
            autoreset_mode=AutoresetMode.DISABLED,
            shared_memory=False,
        )
        self.num_envs = num_envs
        self.observation_space = self.vec.single_observation_space
        self.action_space = self.vec.single_action_space
        self.stats = _Stats(num_envs)

    def _call(self, fn: Any, what: str) -> Any:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - a hang (TimeoutError) or the env's own error
            self.vec.close(terminate=True)
            raise EnvStepError(
                f"the environment's {what} failed in its child process: {type(exc).__name__}: {exc}"
            ) from exc

    def reset(self, seed: int) -> np.ndarray:
        def go() -> Any:
            self.vec.reset_async(seed=[seed + i for i in range(self.num_envs)])
            return self.vec.reset_wait(timeout=self.timeout)[0]

        self.stats = _Stats(self.num_envs)
        return self._call(go, "reset()")

    def step(self, actions: np.ndarray) -> StepOut:
        def go() -> Any:
            self.vec.step_async(actions)
            return self.vec.step_wait(timeout=self.timeout)

        obs, reward, term, trunc, _ = self._call(go, "step()")
        reward = np.asarray(reward, dtype=np.float64).copy()
        term, trunc = np.asarray(term).copy(), np.asarray(trunc).copy()
        out = StepOut(obs, reward, term, trunc)
        flat = obs.reshape(self.num_envs, -1)
        bad_o = ~np.isfinite(flat).all(1) if np.issubdtype(obs.dtype, np.floating) else None
        bad_r = ~np.isfinite(reward)
        bad = bad_r | (bad_o if bad_o is not None else False)
        out.nan_obs = int(bad_o.sum()) if bad_o is not None else 0
        out.nan_reward = int(bad_r.sum())
        reward[bad] = 0.0
        term[bad] = False
        trunc[bad] = True
        done = term | trunc
        for i in np.flatnonzero(done & ~bad):
            out.final_obs[int(i)] = obs[i].copy()
        if done.any():

            def again() -> Any:
                self.vec.reset_async(options={"reset_mask": done})
                return self.vec.reset_wait(timeout=self.timeout)[0]

            out.obs = self._call(again, "reset()")
        self.stats.add(reward, done, out)
        return out

    def close(self) -> None:
        self.vec.close()

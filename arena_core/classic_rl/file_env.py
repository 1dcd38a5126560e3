"""Environments from a user's file (`env.path=my_env.py:MyEnv`), stepped in the sandbox.

Each env is one sandbox worker (`arena_core.sandbox.process.Child`: kernel isolation when
available, memory limit, lifeline, no credentials) running `_env_worker.py`. Messages are
JSON lines both ways, so nothing the user's code produces is ever unpickled in the trainer;
observations are rebuilt from the space the worker described at start-up and checked against
its shape. All workers step in lockstep (send every action, then collect every reply), so N
envs use N cores. A worker that raises, dies or hangs past `env.step_timeout_s` stops the run
with an EnvStepError naming the env, the line and the operation.
"""

from __future__ import annotations

import select
import time
from pathlib import Path
from typing import Any

import numpy as np
from gymnasium import spaces

from arena_core.classic_rl.envs import EnvSource
from arena_core.classic_rl.spaces import UnsupportedSpaceError, unsupported_message
from arena_core.classic_rl.vec import EnvStepError, StepOut, _Stats

WORKER = str(Path(__file__).with_name("_env_worker.py"))
START_TIMEOUT_S = 60.0  # importing gymnasium/numpy (and the user's imports) in a fresh process


def _space(spec: dict[str, Any], target: str, which: str) -> spaces.Space:
    kind = spec.get("type")
    if kind == "Box":
        return spaces.Box(
            np.asarray(spec["low"], dtype=spec["dtype"]),
            np.asarray(spec["high"], dtype=spec["dtype"]),
            tuple(spec["shape"]),
            np.dtype(spec["dtype"]),
        )
    if kind == "Discrete":
        return spaces.Discrete(int(spec["n"]), start=int(spec.get("start", 0)))
    if kind == "MultiDiscrete":
        return spaces.MultiDiscrete(spec["nvec"], start=spec.get("start"))
    raise UnsupportedSpaceError(
        unsupported_message(target, which, str(kind), str(spec.get("repr", kind)))
    )


class FileVec:
    """`num_envs` sandboxed workers behind vec's interface (reset, step, close)."""

    def __init__(self, source: EnvSource, num_envs: int, sandbox: dict[str, Any]) -> None:
        from arena_core.sandbox.isolation import SandboxPolicy
        from arena_core.sandbox.process import Child

        self.target, self.timeout = source.target, source.step_timeout_s
        self.num_envs = num_envs
        file = str(Path(source.target.rpartition(":")[0]).resolve())
        cfg = {
            "target": f"{file}:{source.target.rpartition(':')[2]}",
            "kwargs": source.kwargs,
            "wrappers": list(source.wrappers()),
            "memory_mb": source.memory_mb,
        }
        policy = SandboxPolicy.from_config(sandbox)
        self.children: list[Any] = []
        try:
            for _ in range(num_envs):
                self.children.append(
                    Child([WORKER], cfg, pythonpath=True, policy=policy, expose=[file])
                )
            first = self._collect("start-up (import and __init__)", START_TIMEOUT_S)
            described = first[0]["spaces"]  # every worker built the same class
            self.observation_space = _space(
                described["observation"], self.target, "observation_space"
            )
            self.action_space = _space(described["action"], self.target, "action_space")
        except BaseException:
            self.close()
            raise
        self.stats = _Stats(num_envs)
        self._discrete = isinstance(self.action_space, spaces.Discrete)

    # -- the protocol --------------------------------------------------------------------------
    def _collect(
        self, what: str, timeout: float, envs: list[int] | None = None
    ) -> dict[int, dict[str, Any]]:
        """One reply from each worker in `envs` (default: all), or EnvStepError naming what
        failed: the env raised (with its file:line), died, or hung past `timeout`."""
        envs = list(range(self.num_envs)) if envs is None else envs
        replies: dict[int, dict[str, Any]] = {}
        deadline = time.monotonic() + timeout
        while len(replies) < len(envs):
            waiting = [i for i in envs if i not in replies]
            left = deadline - time.monotonic()
            if left <= 0:
                stack = self.children[waiting[0]].dump_stack()
                self._fail(waiting[0], f"hung in {what} for more than {timeout:.0f} s", stack)
            select.select([self.children[i].resp for i in waiting], [], [], min(left, 1.0))
            for i in waiting:
                child = self.children[i]
                messages = child.read()
                if messages:
                    replies[i] = messages[0]
                    if "error" in messages[0]:
                        err = messages[0]["error"]
                        err = err if isinstance(err, dict) else {"detail": str(err)}
                        where = f" ({err.get('file')}:{err['line']})" if err.get("line") else ""
                        self._fail(i, f"raised in {what}: {err.get('detail', err)}{where}", "")
                elif child.eof or child.corrupt:
                    why = (
                        " (it wrote something that is not Arena's protocol)"
                        if child.corrupt
                        else ""
                    )
                    self._fail(i, f"died in {what}{why}", child.output_tail(2000))
        return replies

    def _fail(self, i: int, detail: str, output: str) -> None:
        self.close()
        tail = f"\nits last output:\n{output.strip()[-1500:]}" if output.strip() else ""
        raise EnvStepError(f"env {i} ({self.target}, sandboxed) {detail}{tail}")

    def _obs(self, reply: dict[str, Any], i: int) -> np.ndarray:
        space = self.observation_space
        obs = np.asarray(reply.get("obs"), dtype=space.dtype)
        if obs.shape != space.shape:
            self._fail(
                i, f"returned an observation of shape {obs.shape}, expected {space.shape}", ""
            )
        return obs

    # -- the vector-env interface ----------------------------------------------------------------
    def reset(self, seed: int) -> np.ndarray:
        for i, child in enumerate(self.children):
            child.send({"cmd": "reset", "seed": seed + i})
        replies = self._collect("reset()", self.timeout)
        self.stats = _Stats(self.num_envs)
        return np.stack([self._obs(replies[i], i) for i in range(self.num_envs)])

    def step(self, actions: np.ndarray) -> StepOut:
        for child, a in zip(self.children, actions, strict=True):
            action = int(a) if self._discrete else np.asarray(a).tolist()
            child.send({"cmd": "step", "action": action})
        replies = self._collect("step()", self.timeout)
        n = self.num_envs
        out = StepOut(
            np.zeros((n, *self.observation_space.shape), self.observation_space.dtype),
            np.zeros(n),
            np.zeros(n, dtype=bool),
            np.zeros(n, dtype=bool),
        )
        done_idx = []
        for i in range(n):
            r = replies[i]
            obs, reward = self._obs(r, i), float(r.get("reward", 0.0))
            bad_o = obs.dtype.kind == "f" and not np.isfinite(obs).all()
            bad_r = not np.isfinite(reward)
            out.nan_obs += bad_o
            out.nan_reward += bad_r
            term, trunc = bool(r.get("terminated")), bool(r.get("truncated"))
            if bad_o or bad_r:
                reward, term, trunc = 0.0, False, True
            elif term or trunc:
                out.final_obs[i] = obs
            out.obs[i], out.reward[i], out.terminated[i], out.truncated[i] = (
                obs,
                reward,
                term,
                trunc,
            )
            if term or trunc:
                done_idx.append(i)
        for i in done_idx:  # a finished episode restarts at once (its first obs is returned)
            self.children[i].send({"cmd": "reset"})
        if done_idx:
            restarted = self._collect("reset()", self.timeout, done_idx)
            for i in done_idx:
                out.obs[i] = self._obs(restarted[i], i)
        self.stats.add(out.reward, out.terminated | out.truncated, out)
        return out

    def close(self) -> None:
        for child in self.children:
            child.send({"cmd": "close"})
        for child in self.children:
            child.wait_exit(timeout=2.0)  # a clean exit first; then the sandbox's kill and reap
            child.kill()
        self.children = []

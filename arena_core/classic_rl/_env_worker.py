"""The child side of a sandboxed environment: one user env file, stepped over JSON lines.

Started by `file_env.FileVec` through the sandbox's `Child` (kernel isolation when
available, limits, lifeline, credentials removed). Protocol, one JSON object per line:
  child -> parent first: {"spaces": {"observation": SPEC, "action": SPEC}} or {"error": ...}
  parent -> child: {"cmd": "reset", "seed": int} | {"cmd": "step", "action": ...} | {"cmd": "close"}
  child -> parent: {"obs": [...], "reward": float, "terminated": bool, "truncated": bool}
                   or {"error": {...}} (the env raised; the parent stops the run with it)
Everything the parent reads is JSON, never a pickle: user code cannot run code in the trainer.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import numpy as np

from arena_core.sandbox import _child


def space_spec(space: Any) -> dict[str, Any]:
    """A JSON description of a Gymnasium space (Box, Discrete, MultiDiscrete; else its name)."""
    from gymnasium import spaces

    if isinstance(space, spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "shape": list(space.shape),
            "dtype": str(space.dtype),
        }
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    return {"type": type(space).__name__, "repr": str(space)[:200]}


def _obs(x: Any) -> Any:
    return np.asarray(x).tolist()


def main() -> None:
    cfg = json.loads(sys.argv[1])
    resp = cfg["resp"]
    _child.apply_limits(cfg.get("memory_mb"), None, cfg.get("max_processes"))
    _child.become_subreaper()
    _child.start_lifeline(cfg["life"])
    _child.enable_tracebacks()
    from arena_core.classic_rl.envs import load_file_env

    path = cfg["target"].rpartition(":")[0]
    try:
        env = load_file_env(cfg["target"], cfg["kwargs"], tuple(cfg["wrappers"]))
        spec = {"observation": space_spec(env.observation_space)}
        spec["action"] = space_spec(env.action_space)
        _child.send(resp, {"spaces": spec})
    except BaseException as exc:  # noqa: BLE001 - user code may raise anything
        _child.send(resp, {"error": _child.describe_exception(exc, path)})
        return
    with os.fdopen(cfg["req"], "rb") as requests:
        for line in requests:
            msg = json.loads(line)
            try:
                if msg["cmd"] == "close":
                    env.close()
                    break
                if msg["cmd"] == "reset":
                    obs, _ = env.reset(seed=msg.get("seed"))
                    _child.send(resp, {"obs": _obs(obs)})
                    continue
                action = msg["action"]
                action = np.asarray(action) if isinstance(action, list) else action
                obs, reward, term, trunc, _ = env.step(action)
                _child.send(
                    resp,
                    {
                        "obs": _obs(obs),
                        "reward": float(reward),
                        "terminated": bool(term),
                        "truncated": bool(trunc),
                    },
                )
            except BaseException as exc:  # noqa: BLE001
                _child.send(resp, {"error": _child.describe_exception(exc, path)})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()


if __name__ == "__main__":
    main()

"""Deterministic evaluation episodes on their own, separately seeded environments.

Each evaluation plays `episodes` episodes with the policy's most likely action, in waves of
`vec.num_envs` environments; wave k resets env i with `seed + k * num_envs + i`, so every
evaluation of a run sees the same starting states and the returns are comparable over time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

MAX_EVAL_STEPS = 100_000  # a guard against an env that never ends an episode
EVAL_SEED_OFFSET = 1_000_000  # evaluation envs never share seeds with training envs (PPO, IPPO)


@torch.inference_mode()
def evaluate(net: Any, vec: Any, episodes: int, seed: int) -> list[float]:
    """Returns of `episodes` deterministic episodes (see module docstring)."""
    returns: list[float] = []
    wave = 0
    while len(returns) < episodes:
        obs = vec.reset(seed + wave * vec.num_envs)
        active = np.ones(vec.num_envs, dtype=bool)
        active[max(0, episodes - len(returns)) :] = False
        ret = np.zeros(vec.num_envs)
        for _ in range(MAX_EVAL_STEPS):
            action, _, _ = net.act(net.prepare(torch.as_tensor(obs)), deterministic=True)
            out = vec.step(net.to_env_action(action))
            ret += np.where(active, out.reward, 0.0)
            done = (out.terminated | out.truncated) & active
            for i in np.flatnonzero(done):
                returns.append(float(ret[i]))
            active &= ~done
            obs = out.obs
            if not active.any():
                break
        else:
            returns.extend(float(r) for r in ret[active])
        wave += 1
    return returns[:episodes]

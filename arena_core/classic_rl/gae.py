"""Generalised advantage estimation and reward scaling for the on-policy loops.

`gae` is the textbook recursion (Schulman et al. 2016) over a [T, N] rollout; `RewardScaler` is
SB3's VecNormalize reward scaling (divide by the running std of the discounted return), whose
state travels in the checkpoint so a resumed run scales rewards as before.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def gae(
    rewards: np.ndarray,
    values: np.ndarray,
    dones: np.ndarray,
    last_value: np.ndarray,
    last_done: np.ndarray,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """(advantages, returns) for rewards/values/dones of shape [T, N].

    `dones[t]` says whether the observation at step t starts a new episode (so step t-1's
    bootstrap is cut); `last_done` is that flag for the observation after the rollout.
    """
    steps = rewards.shape[0]
    adv = np.zeros_like(rewards, dtype=np.float32)
    last = np.zeros(rewards.shape[1], dtype=np.float32)
    for t in reversed(range(steps)):
        if t == steps - 1:
            not_done, next_value = 1.0 - last_done, last_value
        else:
            not_done, next_value = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * next_value * not_done - values[t]
        last = delta + gamma * lam * not_done * last
        adv[t] = last
    return adv, adv + values


class RewardScaler:
    """Scale rewards by the std of the running discounted return, clipped (VecNormalize)."""

    def __init__(self, num_envs: int, gamma: float, clip: float) -> None:
        self.gamma, self.clip = gamma, clip
        self.ret = np.zeros(num_envs, dtype=np.float64)
        self.mean, self.var, self.count = 0.0, 1.0, 1e-4

    def __call__(self, reward: np.ndarray, done: np.ndarray) -> np.ndarray:
        self.ret = self.ret * self.gamma + reward
        b_mean, b_var, b_n = float(self.ret.mean()), float(self.ret.var()), len(self.ret)
        delta, tot = b_mean - self.mean, self.count + b_n
        m2 = self.var * self.count + b_var * b_n + delta**2 * self.count * b_n / tot
        self.mean, self.var, self.count = self.mean + delta * b_n / tot, m2 / tot, tot
        self.ret[done] = 0.0
        return np.clip(reward / np.sqrt(self.var + 1e-8), -self.clip, self.clip)

    def state(self) -> dict[str, Any]:
        return {"mean": self.mean, "var": self.var, "count": self.count}

    def load(self, state: dict[str, Any]) -> None:
        self.mean, self.var, self.count = state["mean"], state["var"], state["count"]

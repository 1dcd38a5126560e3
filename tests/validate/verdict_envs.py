"""Environments for test_validate_verdicts.py, given to `arena validate env` as file.py:Name."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Sized(gym.Env):
    """A one-step env whose action space is set by a constructor argument: env.kwargs reach
    it or the action space says they did not."""

    def __init__(self, n_actions: int = 2) -> None:
        self.action_space = spaces.Discrete(n_actions)
        self.observation_space = spaces.Box(-1.0, 1.0, (3,), np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return self.np_random.uniform(-1, 1, 3).astype(np.float32), {}

    def step(self, action):
        obs = self.np_random.uniform(-1, 1, 3).astype(np.float32)
        return obs, float(action), True, False, {}


def normalized():
    """CartPole under NormalizeObservation: its running statistics change at every reset, so
    reset(seed) does not repeat, by design of the wrapper."""
    return gym.wrappers.NormalizeObservation(gym.make("CartPole-v1"))

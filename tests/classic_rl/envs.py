"""Small environments for the classic-RL tests: each one exists to make a behaviour visible.

- `Reach` (Gymnasium): move along a line to a target; learnable in a few thousand steps.
- `NaNReach`: `Reach` whose observation (or reward) is NaN every `every` steps.
- `DictObs`, `TextObs`: spaces PPO cannot take without a wrapper.
- `LineWalkers` (PettingZoo parallel): agents walk to their targets; an agent that arrives leaves
  the episode (dies), and `late_0` joins at step 3; `nan_every` makes an observation NaN.
"""

from __future__ import annotations

import functools

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv


class Reach(gym.Env):
    """Walk left or right (Discrete 2) to reach a random target; 20 steps at most."""

    def __init__(self, max_steps: int = 20) -> None:
        self.observation_space = spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.max_steps = max_steps

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = 0.0
        self.target = float(self.np_random.choice([-1.0, 1.0]))
        self.t = 0
        return self._obs(), {}

    def _obs(self):
        return np.array([self.pos, self.target - self.pos], dtype=np.float32)

    def step(self, action):
        self.pos += 0.2 if int(action) == 1 else -0.2
        self.t += 1
        reached = abs(self.pos - self.target) < 0.1
        reward = 1.0 if reached else -0.05
        return self._obs(), reward, reached, self.t >= self.max_steps and not reached, {}


class NaNReach(Reach):
    """Every `every`-th step returns a NaN observation (or a NaN reward with nan_reward)."""

    def __init__(self, every: int = 7, nan_reward: bool = False) -> None:
        super().__init__()
        self.every, self.nan_reward, self.calls = every, nan_reward, 0

    def step(self, action):
        obs, reward, term, trunc, info = super().step(action)
        self.calls += 1
        if self.calls % self.every == 0:
            if self.nan_reward:
                reward = float("nan")
            else:
                obs = np.full_like(obs, np.nan)
        return obs, reward, term, trunc, info


class Crashy(Reach):
    """Raises on its 200th step: an environment bug the run must report, not hide."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def step(self, action):
        self.calls += 1
        if self.calls == 200:
            raise ValueError("wing fell off")
        return super().step(action)


class DictObs(Reach):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Dict(
            {
                "pos": spaces.Box(-2.0, 2.0, (1,), np.float32),
                "gap": spaces.Box(-2.0, 2.0, (1,), np.float32),
            }
        )

    def _obs(self):
        return {
            "pos": np.array([self.pos], dtype=np.float32),
            "gap": np.array([self.target - self.pos], dtype=np.float32),
        }


class TextObs(Reach):
    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Text(32)

    def _obs(self):
        return f"{self.pos:.1f}"


class LineWalkers(ParallelEnv):
    """walker_0, walker_1 from the start and late_0 from step 3; each walks to its own target
    (Discrete 3: left, stay, right) and leaves when it arrives (+1); -0.05 per step otherwise."""

    metadata = {"name": "line_walkers_v0"}

    def __init__(self, max_steps: int = 16, nan_every: int = 0) -> None:
        self.possible_agents = ["walker_0", "walker_1", "late_0"]
        self.max_steps, self.nan_every, self.calls = max_steps, nan_every, 0
        self.rng = np.random.default_rng(0)

    @functools.cache  # noqa: B019 - spaces are constant per agent
    def observation_space(self, agent):
        # in 16 steps of 0.25: |pos| <= 4 and |target - pos| <= 5, whatever the actions
        return spaces.Box(-5.0, 5.0, (3,), np.float32)

    @functools.cache  # noqa: B019
    def action_space(self, agent):
        return spaces.Discrete(3)

    def reset(self, seed=None, options=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.t = 0
        self.agents = ["walker_0", "walker_1"]
        self.pos = dict.fromkeys(self.possible_agents, 0.0)
        self.target = {a: float(self.rng.choice([-1.0, 1.0])) for a in self.possible_agents}
        self.joined = False
        return {a: self._obs(a) for a in self.agents}, {a: {} for a in self.agents}

    def _obs(self, a):
        return np.array(
            [self.pos[a], self.target[a] - self.pos[a], self.t / self.max_steps], np.float32
        )

    def step(self, actions):
        self.t += 1
        rewards, terms, truncs = {}, {}, {}
        for a in self.agents:
            self.pos[a] += (int(actions[a]) - 1) * 0.25
            done = abs(self.pos[a] - self.target[a]) < 0.1
            rewards[a] = 1.0 if done else -0.05
            terms[a] = done
            truncs[a] = self.t >= self.max_steps and not done
        obs = {a: self._obs(a) for a in self.agents}
        self.calls += 1
        if self.nan_every and self.calls % self.nan_every == 0 and obs:
            obs[next(iter(obs))] = np.full(3, np.nan, np.float32)
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (terms[a] or truncs[a])]
        if self.t == 3 and not self.joined and self.t < self.max_steps:
            self.joined = True
            self.agents.append("late_0")
            obs["late_0"] = self._obs("late_0")
        return obs, rewards, terms, truncs, infos


class Pixels(Reach):
    """`Reach` seen as a 36x36 grey image (uint8): exercises the CNN encoder."""

    def __init__(self) -> None:
        super().__init__()
        self.observation_space = spaces.Box(0, 255, (36, 36, 1), np.uint8)

    def _obs(self):
        img = np.zeros((36, 36, 1), dtype=np.uint8)
        img[18, int(np.clip((self.pos + 2) * 8.75, 0, 35))] = 255
        img[10, int(np.clip((self.target + 2) * 8.75, 0, 35))] = 128
        return img

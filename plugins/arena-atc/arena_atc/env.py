"""Air-traffic control: vector the aircraft in a square sector to their exit points, apart.

The sector is the unit square. Each episode `n_aircraft` aircraft enter on random edges, flying
towards the sector with a constant speed; each must leave through its own exit point, placed on
a different edge, so straight routes cross and a controller has to vector some of them aside.

- Observation (Box, float32, `n_aircraft * 10`): per aircraft its position, the direction and
  distance of its exit (in the aircraft's own frame: x ahead, y to the left), the offset of the
  most threatening other aircraft, their predicted miss distance (in separation minima) and the
  time until it (a conflict probe), and an active flag (zeros once it has left).
- Action: `action_mode="per_aircraft"` (default) is MultiDiscrete([5] * n): a heading change of
  -30, -15, 0, +15 or +30 degrees per aircraft; `"chosen"` is Discrete(1 + 4n): hold everyone,
  or turn one chosen aircraft by one of the four non-zero changes.
- Reward: +exit_reward for an aircraft that reaches its exit, -wrong_exit_penalty for one that
  leaves elsewhere, -separation_penalty per pair closer than `min_separation` per step, -fuel per
  active aircraft per step, plus the progress made towards the exit (a potential-based shaping
  term that does not change which policy is best).
- The episode terminates when every aircraft has left and truncates at `max_steps`.
- `render_mode="rgb_array"` draws the sector with numpy (no display needed).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

TURNS_DEG = (-30.0, -15.0, 0.0, 15.0, 30.0)
FEATURES = 10
HORIZON = 30.0  # steps ahead the conflict probe looks
_TURNS_RAD = [math.radians(d) for d in TURNS_DEG]


class AirTrafficEnv(gym.Env):
    """See the module docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        n_aircraft: int = 3,
        speed: float = 0.03,
        min_separation: float = 0.15,
        exit_radius: float = 0.08,
        max_steps: int = 120,
        exit_reward: float = 10.0,
        wrong_exit_penalty: float = 10.0,
        separation_penalty: float = 5.0,
        fuel: float = 0.02,
        action_mode: str = "per_aircraft",
        render_mode: str | None = None,
        render_size: int = 256,
    ) -> None:
        if action_mode not in ("per_aircraft", "chosen"):
            raise ValueError(f"action_mode must be 'per_aircraft' or 'chosen', got {action_mode!r}")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.n = int(n_aircraft)
        self.speed, self.min_sep, self.exit_radius = speed, min_separation, exit_radius
        self.max_steps = int(max_steps)
        self.exit_reward, self.wrong_exit_penalty = exit_reward, wrong_exit_penalty
        self.separation_penalty, self.fuel = separation_penalty, fuel
        self.action_mode, self.render_mode, self.render_size = action_mode, render_mode, render_size
        self.observation_space = spaces.Box(-2.0, 2.0, (self.n * FEATURES,), np.float32)
        if action_mode == "per_aircraft":
            self.action_space: spaces.Space = spaces.MultiDiscrete([len(TURNS_DEG)] * self.n)
        else:
            self.action_space = spaces.Discrete(1 + 4 * self.n)
        self.pos = np.zeros((self.n, 2))
        self.heading = np.zeros(self.n)
        self.exit = np.zeros((self.n, 2))
        self.active = np.zeros(self.n, dtype=bool)
        self.t = 0
        self.losses = 0  # separation losses (pair-steps) this episode
        self.exits = 0

    # -- episode -------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        rng = self.np_random
        edges = rng.permutation(4)[: self.n] if self.n <= 4 else rng.integers(0, 4, self.n)
        for i, edge in enumerate(edges):
            self.pos[i] = _edge_point(int(edge), rng.uniform(0.2, 0.8), inset=0.02)
            exit_edge = (int(edge) + rng.integers(1, 4)) % 4  # any other edge
            self.exit[i] = _edge_point(int(exit_edge), rng.uniform(0.15, 0.85), inset=0.0)
            to_centre = np.array([0.5, 0.5]) - self.pos[i]
            self.heading[i] = math.atan2(to_centre[1], to_centre[0]) + rng.uniform(-0.4, 0.4)
        self.active[:] = True
        self.t = self.losses = self.exits = 0
        return self._obs(), self._info()

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        # plain Python floats: for a handful of aircraft, numpy's per-call cost dominates
        turns = self._turns(action)
        pos, heading, exits, active = self.pos, self.heading, self.exit, self.active
        reward = 0.0
        live = [i for i in range(self.n) if active[i]]
        for i in live:
            x, y = float(pos[i, 0]), float(pos[i, 1])
            ex, ey = float(exits[i, 0]), float(exits[i, 1])
            before = math.hypot(ex - x, ey - y)
            h = float(heading[i]) + turns[i]
            x, y = x + self.speed * math.cos(h), y + self.speed * math.sin(h)
            heading[i], pos[i, 0], pos[i, 1] = h, x, y
            after = math.hypot(ex - x, ey - y)
            reward += before - after - self.fuel  # progress shaping, fuel
            if after < self.exit_radius:
                active[i] = False
                self.exits += 1
                reward += self.exit_reward
            elif not (0.0 <= x <= 1.0 and 0.0 <= y <= 1.0):
                active[i] = False
                reward -= self.wrong_exit_penalty
        conflicts = self._conflicts()
        self.losses += conflicts
        reward -= self.separation_penalty * conflicts
        self.t += 1
        terminated = not active.any()
        truncated = self.t >= self.max_steps and not terminated
        return self._obs(), reward, terminated, truncated, self._info()

    # -- helpers -------------------------------------------------------------------------------
    def _turns(self, action: Any) -> list[float]:
        if self.action_mode == "per_aircraft":
            return [_TURNS_RAD[int(k)] for k in np.asarray(action).reshape(self.n)]
        turns = [0.0] * self.n
        a = int(action)
        if a > 0:
            aircraft, which = divmod(a - 1, 4)
            turns[aircraft] = math.radians((-30.0, -15.0, 15.0, 30.0)[which])
        return turns

    def _conflicts(self) -> int:
        live = [i for i in range(self.n) if self.active[i]]
        pos, count = self.pos.tolist(), 0
        for a, i in enumerate(live):
            for j in live[a + 1 :]:
                if math.hypot(pos[i][0] - pos[j][0], pos[i][1] - pos[j][1]) < self.min_sep:
                    count += 1
        return count

    def _obs(self) -> np.ndarray:
        """Per aircraft, in its own frame (x ahead, y to the left): what a controller needs to
        turn it, without the policy having to learn trigonometry. The "threat" is the other
        aircraft whose predicted closest approach (current headings, next HORIZON steps) is
        nearest, as a controller's conflict probe would show it."""
        pos, exits, heading = self.pos.tolist(), self.exit.tolist(), self.heading.tolist()
        live = [i for i in range(self.n) if self.active[i]]
        vel = [(self.speed * math.cos(h), self.speed * math.sin(h)) for h in heading]
        out = [0.0] * (self.n * FEATURES)
        for i in live:
            c, s = math.cos(heading[i]), math.sin(heading[i])
            tx, ty = exits[i][0] - pos[i][0], exits[i][1] - pos[i][1]
            dist = max(math.hypot(tx, ty), 1e-6)
            px = py = 0.0
            miss, when = 2.0 * self.min_sep, HORIZON
            for j in live:
                if j == i:
                    continue
                rx, ry = pos[j][0] - pos[i][0], pos[j][1] - pos[i][1]
                vx, vy = vel[j][0] - vel[i][0], vel[j][1] - vel[i][1]
                vv = vx * vx + vy * vy
                t = 0.0 if vv < 1e-12 else min(max(-(rx * vx + ry * vy) / vv, 0.0), HORIZON)
                d = math.hypot(rx + vx * t, ry + vy * t)
                if d < miss:
                    px, py, miss, when = rx, ry, d, t
            k = i * FEATURES
            out[k : k + FEATURES] = (
                pos[i][0],
                pos[i][1],
                (c * tx + s * ty) / dist,
                (-s * tx + c * ty) / dist,
                dist,
                c * px + s * py,
                -s * px + c * py,
                min(miss / self.min_sep, 2.0),
                when / HORIZON,
                1.0,
            )
        return np.clip(np.asarray(out, dtype=np.float32), -2.0, 2.0)

    def _info(self) -> dict[str, Any]:
        return {
            "separation_losses": self.losses,
            "exits": self.exits,
            "active": int(self.active.sum()),
        }

    # -- rendering -----------------------------------------------------------------------------
    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        s = self.render_size
        img = np.full((s, s, 3), (18, 32, 48), dtype=np.uint8)
        yy, xx = np.mgrid[0:s, 0:s]
        colours = [(230, 90, 80), (90, 200, 120), (90, 150, 240), (240, 200, 80), (200, 120, 230)]

        def disc(p: np.ndarray, r: float, colour: tuple[int, int, int], ring: bool = False) -> None:
            cx, cy = p[0] * (s - 1), (1.0 - p[1]) * (s - 1)
            d2 = (xx - cx) ** 2 + (yy - cy) ** 2
            rr = (r * (s - 1)) ** 2
            mask = (d2 <= rr) & (d2 >= 0.8 * rr) if ring else d2 <= rr
            img[mask] = colour

        for i in range(self.n):
            colour = colours[i % len(colours)]
            disc(self.exit[i], self.exit_radius, colour, ring=True)
            if self.active[i]:
                disc(self.pos[i], self.min_sep / 2, (120, 120, 120), ring=True)
                disc(self.pos[i], 0.02, colour)
                nose = self.pos[i] + 0.04 * np.array(
                    [math.cos(self.heading[i]), math.sin(self.heading[i])]
                )
                disc(nose, 0.008, (255, 255, 255))
        return img


def _edge_point(edge: int, u: float, inset: float) -> np.ndarray:
    """A point on edge 0 (left), 1 (bottom), 2 (right) or 3 (top) at fraction u along it."""
    return np.array(
        [(inset, u), (u, inset), (1.0 - inset, u), (u, 1.0 - inset)][edge], dtype=np.float64
    )


def heading_to_exit(env: AirTrafficEnv) -> Any:
    """The baseline controller: turn every aircraft towards its exit (ignoring separation)."""
    base = env.unwrapped
    want = np.arctan2(base.exit[:, 1] - base.pos[:, 1], base.exit[:, 0] - base.pos[:, 0])
    err = (want - base.heading + np.pi) % (2 * np.pi) - np.pi
    options = np.radians(np.asarray(TURNS_DEG))
    idx = np.argmin(np.abs(err[:, None] - options[None, :]), axis=1)
    if base.action_mode == "per_aircraft":
        return idx.astype(np.int64)
    worst = int(np.argmax(np.abs(err) * base.active))
    which = {0: 0, 1: 1, 3: 2, 4: 3}.get(int(idx[worst]))
    return 0 if which is None else 1 + 4 * worst + which

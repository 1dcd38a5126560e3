"""arena-atc's own tests: Arena's conformance suite, subclassed, and the environment's rules.

Run with `pytest plugins/arena-atc/tests` after `pip install -e plugins/arena-atc`.
"""

from __future__ import annotations

import numpy as np
import pytest
from arena_atc.env import AirTrafficEnv, heading_to_exit
from arena_atc.plugin import AtcConfig, make_atc

from arena_core.testing import EnvConformance


class TestAtcRegistered(EnvConformance):
    env_name = "atc"
    config = {"n_aircraft": 3}


class TestAtcFactory(EnvConformance):
    factory = make_atc
    schema = AtcConfig
    config = {"n_aircraft": 2, "action_mode": "chosen"}


def _episode_return(env: AirTrafficEnv, policy, seed: int) -> tuple[float, dict]:
    env.reset(seed=seed)
    total, done, info = 0.0, False, {}
    while not done:
        _, reward, term, trunc, info = env.step(policy(env))
        total += reward
        done = term or trunc
    return total, info


@pytest.mark.parametrize("mode", ["per_aircraft", "chosen"])
def test_baseline_beats_random(mode: str) -> None:
    env = AirTrafficEnv(action_mode=mode)
    env.action_space.seed(0)
    base = [_episode_return(env, heading_to_exit, s)[0] for s in range(30)]
    rand = [_episode_return(env, lambda e: e.action_space.sample(), s)[0] for s in range(30)]
    assert np.mean(base) > np.mean(rand) + 20


def test_baseline_reaches_exits_but_loses_separation() -> None:
    """Why a learned controller can do better: straight routes cross."""
    env = AirTrafficEnv()
    infos = [_episode_return(env, heading_to_exit, s)[1] for s in range(40)]
    assert all(i["exits"] == 3 for i in infos)
    assert sum(i["separation_losses"] > 0 for i in infos) >= 8


def test_rgb_array_render() -> None:
    env = AirTrafficEnv(render_mode="rgb_array", render_size=64)
    env.reset(seed=1)
    frame = env.render()
    assert frame.shape == (64, 64, 3) and frame.dtype == np.uint8 and frame.std() > 0
    assert AirTrafficEnv().render() is None


def test_observation_in_space_and_zeroed_after_exit() -> None:
    env = AirTrafficEnv(n_aircraft=2)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    done = False
    while not done:
        obs, _, term, trunc, _ = env.step(heading_to_exit(env))
        assert env.observation_space.contains(obs)
        done = term or trunc
    assert term and not obs.any()


def test_bad_options_are_errors() -> None:
    with pytest.raises(ValueError, match="action_mode"):
        AirTrafficEnv(action_mode="joystick")
    with pytest.raises(ValueError, match="render_mode"):
        AirTrafficEnv(render_mode="human")

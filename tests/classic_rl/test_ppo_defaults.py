"""PPO's defaults are the ones measured to solve CartPole-v1 (a full run is too long for a test).

Measured with `arena-run +algo=ppo +env=gym env.id=CartPole-v1 seed=S eval.episodes=20` (the
defaults: 100 steps of 4 envs x 256 = 102,400 env steps) on a shared 2-core CPU: held-out return
500.0 on seeds 0-5 (17-30 CPU-s each); CleanRL's defaults, used before, ended at 426 and 460
(seeds 0, 1). docs/classic-rl.md quotes the same figures. These tests pin the values
so that a change to them is a deliberate one, remeasured.
"""

from __future__ import annotations

from arena_algorithms.ippo import IPPOConfig
from arena_algorithms.ppo import PPOConfig
from arena_core.config import compose_config

MEASURED = {
    "lr": 1e-3,
    "anneal_lr": True,
    "num_steps": 256,
    "num_minibatches": 4,
    "update_epochs": 10,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ent_coef": 0.0,
    "clip_coef": 0.2,
    "vf_coef": 0.5,
    "max_grad_norm": 0.5,
    "hidden_sizes": [64, 64],
}


def test_the_default_cartpole_run_uses_the_measured_settings() -> None:
    cfg = compose_config(["+algo=ppo", "+env=gym", "env.id=CartPole-v1"])
    assert {k: cfg["algo"][k] for k in MEASURED} == MEASURED
    # the budget the figures were measured at: 100 steps x 4 envs x 256 steps
    assert cfg["train"]["max_steps"] == 100 and cfg["env"]["num_envs"] == 4


def test_the_schema_defaults_match_the_yaml() -> None:
    """`PPOConfig()` (the SDK, an algo section without a field) gives the same values."""
    assert {k: getattr(PPOConfig(), k) for k in MEASURED} == MEASURED
    cfg = compose_config(["+algo=ppo", "+env=gym", "env.id=CartPole-v1"])
    assert PPOConfig().model_dump() == cfg["algo"]


def test_ippo_keeps_cleanrl_defaults() -> None:
    cfg = compose_config(["+algo=ippo", "+env=pettingzoo", "env.id=mpe2.simple_spread_v3"])
    cleanrl = {"lr": 2.5e-4, "num_steps": 128, "update_epochs": 4, "ent_coef": 0.01}
    assert {k: cfg["algo"][k] for k in cleanrl} == cleanrl
    assert {k: getattr(IPPOConfig(), k) for k in cleanrl} == cleanrl

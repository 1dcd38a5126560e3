"""IPPO (independent PPO, de Witt et al. 2020) for PettingZoo parallel environments.

Each agent learns from its own observations, rewards and advantages with PPO's loss. Agents
with the same observation and action spaces and the same name prefix (`adversary_0`,
`adversary_1` -> group `adversary`) form a group; with `share_parameters` (the default) a group
shares one network, otherwise every agent has its own. Agents that die or join mid-episode are
followed through the parallel API's `agents` list. The loop is arena_core/classic_rl/ippo.py.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import BaseModel, Field

from arena_algorithms.ppo import PPO, PPOConfig


class IPPOConfig(PPOConfig):
    """The `algo` section for IPPO: PPO's fields plus how agents share networks. Its defaults
    stay CleanRL's (arena_algorithms/conf/algo/ippo.yaml): PPO's were tuned on CartPole."""

    name: str = "ippo"
    lr: float = Field(2.5e-4, gt=0, description="Adam learning rate.")
    num_steps: int = Field(128, ge=1, description="Parallel-env steps per rollout.")
    update_epochs: int = Field(4, ge=1, description="Passes over each rollout.")
    ent_coef: float = Field(0.01, ge=0, description="Entropy bonus coefficient.")
    share_parameters: bool = Field(
        True, description="One network per agent group (True) or one per agent (False)."
    )
    group_by: str = Field(
        "prefix",
        pattern="^(prefix|agent|all)$",
        description="prefix: agents named <group>_<i> with equal spaces share a group; agent: "
        "every agent alone; all: one group (spaces must match).",
    )


class IPPO(PPO):
    """PPO's loss applied per agent group (see module docstring)."""

    config_class: ClassVar[type[BaseModel]] = IPPOConfig
    recipe: ClassVar[str] = "ippo"

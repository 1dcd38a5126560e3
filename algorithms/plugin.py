"""The built-in algorithms, registered through the `arena` entry point like any third party."""

from __future__ import annotations

from arena_algorithms.cispo import CISPO, CISPOConfig
from arena_algorithms.grpo import GRPO, GRPOConfig

from arena_core.hookspecs import Register, hookimpl


@hookimpl
def register_algorithms(register: Register) -> None:
    register(
        "grpo",
        GRPO,
        schema=GRPOConfig,
        description="GRPO: group-relative advantages, PPO clip, optional KL (Dr.GRPO via "
        "scale_rewards=none)",
    )
    register(
        "cispo",
        CISPO,
        schema=CISPOConfig,
        description="CISPO (MiniMax-M1): clipped, detached IS weight times log-prob",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_algorithms.conf"]

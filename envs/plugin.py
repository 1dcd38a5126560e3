"""The built-in environments, registered like any plugin's, with their Hydra options in conf/."""

from __future__ import annotations

from arena_envs.arithmetic import ArithmeticConfig, make_arithmetic
from arena_envs.gsm8k import Gsm8kConfig, make_gsm8k

from arena_core import hookimpl
from arena_core.hookspecs import Register


@hookimpl
def register_envs(register: Register) -> None:
    register(
        "gsm8k",
        make_gsm8k,
        schema=Gsm8kConfig,
        description="GSM8K math word problems (hub openai/gsm8k, or env.path for a local copy)",
    )
    register(
        "arithmetic",
        make_arithmetic,
        schema=ArithmeticConfig,
        description="Offline generated 1-2 digit arithmetic in GSM8K format (quickstart task)",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_envs.conf"]

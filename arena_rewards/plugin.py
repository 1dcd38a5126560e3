"""The built-in rewards, registered like any plugin's: each is a reward file given by path."""

from __future__ import annotations

from pathlib import Path

from arena_core import hookimpl
from arena_core.hookspecs import Register

HERE = Path(__file__).resolve().parent


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "gsm8k",
        str(HERE / "gsm8k.py"),
        description="1.0 if the last number in <answer></answer> matches '#### N', "
        "+1.0 for <think></think><answer></answer> format (max 2.0)",
    )
    register(
        "reasoning_gym",
        str(HERE / "reasoning_gym_reward.py"),
        description="reasoning-gym's score_answer on the last <answer></answer> block "
        "(correctness = full marks, partial_credit, optional format credit)",
    )

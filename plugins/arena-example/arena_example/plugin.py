"""The Arena entry point of arena-example (`[project.entry-points.arena]` in pyproject.toml).

Arena imports this module once and calls the hooks below; each hook hands its things to
`register`, so Arena knows which plugin provided what (`arena plugins` shows it).
"""

from __future__ import annotations

from pathlib import Path

from arena_core import hookimpl
from arena_core.hookspecs import Register
from arena_example.countdown import CountdownConfig, CountdownTask
from arena_example.env import ReverseWordsConfig, ReverseWordsTask

REWARD_FILE = Path(__file__).with_name("reward_reverse.py")
COUNTDOWN_REWARD_FILE = Path(__file__).with_name("reward_countdown.py")


@hookimpl
def register_envs(register: Register) -> None:
    register(
        "reverse_words",
        ReverseWordsTask,
        schema=ReverseWordsConfig,
        description="Reverse a short list of words (generated from a seed, no download).",
    )
    register(
        "countdown",
        CountdownTask,
        schema=CountdownConfig,
        description="Reach a target with + - * over a few numbers (generated, no download).",
    )


@hookimpl
def register_rewards(register: Register) -> None:
    register(
        "reverse_words_match",
        str(REWARD_FILE),
        description="1.0 for the exact reversed list, partial credit for words in place.",
    )
    register(
        "countdown_match",
        str(COUNTDOWN_REWARD_FILE),
        description="1.0 for an expression of the given numbers that hits the target, else 0.1/0.",
    )


@hookimpl
def config_searchpath() -> list[str]:
    return ["pkg://arena_example.conf"]

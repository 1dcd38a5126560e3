"""A healthy plugin: loading it next to broken ones shows that the rest still load.

The module is its own reward file (`reward` below), so it stays valid wherever a test copies it.
"""

from arena_core import hookimpl
from arena_core.hookspecs import Register


def reward(question: str, answer: str, completion: str) -> float:
    return float(answer in completion)


@hookimpl
def register_rewards(register: Register) -> None:
    register("testplug_good_reward", __file__)

"""Registers the reward name `shared_reward`; two copies of it make a duplicate-name conflict."""

from arena_core import hookimpl


@hookimpl
def register_rewards(register) -> None:  # noqa: ANN001
    register("shared_reward", __file__)

"""A plugin whose hook asks for an argument the hookspec does not have."""

from arena_core import hookimpl


@hookimpl
def register_envs(register, settings) -> None:  # noqa: ANN001 - deliberately wrong
    register("never", object)

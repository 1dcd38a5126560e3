"""A plugin with a misspelt hook name (`register_env` for `register_envs`)."""

from arena_core import hookimpl


@hookimpl
def register_env(register) -> None:  # noqa: ANN001 - deliberately wrong
    register("never", object)

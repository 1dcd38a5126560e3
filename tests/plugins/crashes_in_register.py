"""A plugin that registers one thing, then crashes: nothing it registered may remain."""

from arena_core import hookimpl


@hookimpl
def register_envs(register) -> None:  # noqa: ANN001
    register("half_registered_env", dict)
    raise ValueError("crash halfway through registration")

"""Core-provided plugins: generation backends, hardware profiles and loggers.

Registered through the `arena` entry point like any third party's plugin.
"""

from __future__ import annotations

from arena_core.hookspecs import Register, hookimpl


@hookimpl
def config_searchpath() -> list[str]:
    return []


def _unused(register: Register) -> None:  # placeholder removed when backends land
    return None

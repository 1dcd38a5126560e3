"""Arena: local-first reinforcement learning with a plugin core."""

__version__ = "0.1.0"

from arena_core.hookspecs import hookimpl  # noqa: E402

__all__ = ["__version__", "hookimpl"]

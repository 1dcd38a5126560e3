"""Testing helpers for Arena and for plugin authors.

- `arena_core.testing.pytest_plugin` (auto-loaded through the `pytest11` entry point) provides the
  fixtures `arena_plugins`, `register_arena_plugin` and `arena_isolated_plugins`.
- `EnvConformance`, `RewardConformance` and `AlgorithmConformance` are suites to subclass in a
  plugin's own tests (`class TestMyEnv(EnvConformance): env_name = "my_env"`);
  `MCPEnvConformance` is the one for MCP environments (`arena_core.testing.mcp_conformance`).

The suites are imported lazily: pytest imports this package for every session of every project in
an environment where Arena is installed, and that must stay cheap.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AlgorithmConformance",
    "EnvConformance",
    "MCPEnvConformance",
    "RewardConformance",
    "load_reward_file",
]


def __getattr__(name: str) -> Any:
    if name == "MCPEnvConformance":
        from arena_core.testing import mcp_conformance

        return mcp_conformance.MCPEnvConformance
    if name == "load_reward_file":
        from arena_core.testing import _checks

        return _checks.load_reward_file
    if name in __all__:
        from arena_core.testing import conformance

        return getattr(conformance, name)
    raise AttributeError(f"module 'arena_core.testing' has no attribute {name!r}")

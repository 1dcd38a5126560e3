"""Arena's pytest plugin (entry point `pytest11: arena`): plugin fixtures for any test suite.

pytest loads this module in every session of every project whose environment has Arena installed,
so it imports nothing beyond pytest at collection time; the plugin machinery is imported by the
fixtures when a test asks for them.

- `arena_plugins`: the process-wide PluginSet, as `arena` and `arena-run` see it.
- `register_arena_plugin`: register a plugin object for one test; it is removed afterwards, with
  everything it registered, so tests cannot leak registrations into each other.
- `arena_isolated_plugins`: a fresh, empty PluginSet installed as the process-wide one for one
  test, for tests that must control exactly which plugins exist.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from arena_core.plugin_loader import PluginInfo, PluginSet


@pytest.fixture
def arena_plugins() -> PluginSet:
    """The process-wide PluginSet (the installed entry points, loaded on first use)."""
    from arena_core.plugin_loader import get_plugins

    return get_plugins()


@pytest.fixture
def arena_isolated_plugins(monkeypatch: pytest.MonkeyPatch) -> PluginSet:
    """An empty PluginSet that `get_plugins()` returns for the duration of one test.

    Nothing is loaded from entry points; call `.load_entry_points()` on it to start from the
    installed plugins. The previous process-wide set comes back after the test.
    """
    from arena_core import plugin_loader as plugins

    fresh = plugins.PluginSet()
    monkeypatch.setattr(plugins, "_PLUGINS", fresh)
    return fresh


@pytest.fixture
def register_arena_plugin() -> Iterator[Callable[..., PluginInfo]]:
    """`register_arena_plugin(plugin, name=None, expect_failure=False) -> PluginInfo`.

    `plugin` is a module, class or instance with `@arena_core.hookimpl` functions. It goes into
    the PluginSet that `get_plugins()` returns at call time (the isolated one when the test also
    uses `arena_isolated_plugins`), and is removed after the test. A plugin that fails to load
    fails the test with its error, unless `expect_failure=True`, which returns the failed
    PluginInfo (its `error` says why) so a test can check the message.
    """
    from arena_core.errors import PluginError
    from arena_core.plugin_loader import get_plugins

    added: list[tuple[Any, str]] = []

    def register(plugin: Any, name: str | None = None, *, expect_failure: bool = False) -> Any:
        plugin_set = get_plugins()
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        info = plugin_set.add(plugin, name)  # raises (and keeps nothing) on a duplicate name
        added.append((plugin_set, name))
        if info.error is not None and not expect_failure:
            raise PluginError(f"test plugin '{name}' failed to load: {info.error}")
        if info.error is None and expect_failure:
            raise AssertionError(f"test plugin '{name}' was expected to fail but loaded")
        return info

    yield register
    for plugin_set, name in reversed(added):
        plugin_set.remove(name)

"""arena_core.testing's pytest plugin: declared as a `pytest11` entry point, import-light, and its
fixtures register a plugin for one test only.

The fixture behaviour is checked in a nested pytest session (in this process), because "removed
after the test" can only be observed from the next test.
"""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

from tests.core.conftest import run_nested

NESTED = """
from arena_core import hookimpl
from arena_core.plugin_loader import get_plugins


class Plugin:
    @hookimpl
    def register_rewards(self, register):
        register("nested_reward", __file__)


def test_registers(register_arena_plugin, arena_plugins):
    info = register_arena_plugin(Plugin(), "nested_plugin")
    assert info.registered == {"rewards": ["nested_reward"]}
    assert arena_plugins.registries.rewards.get("nested_reward").provider == "nested_plugin"


def test_removed_after_the_test(arena_plugins):
    assert "nested_reward" not in arena_plugins.registries.rewards
    assert "nested_plugin" not in arena_plugins.infos


def test_isolated_set_is_empty_and_private(arena_isolated_plugins, register_arena_plugin):
    assert get_plugins() is arena_isolated_plugins and not arena_isolated_plugins.infos
    register_arena_plugin(Plugin(), "nested_plugin")
    assert arena_isolated_plugins.registries.rewards.names() == ["nested_reward"]


def test_the_global_set_is_back(arena_plugins):
    assert "nested_plugin" not in arena_plugins.infos


def test_a_failed_plugin_fails_the_test_unless_expected(register_arena_plugin):
    class Broken:
        @hookimpl
        def register_envs(self, register):
            raise RuntimeError("nope")

    info = register_arena_plugin(Broken(), "broken", expect_failure=True)
    assert "RuntimeError: nope" in info.error
    try:
        register_arena_plugin(Broken(), "broken_again")
    except Exception as exc:
        assert "failed to load" in str(exc) and "nope" in str(exc)
    else:
        raise AssertionError("a failed registration must fail the test")
"""


def test_pytest11_entry_point_is_declared() -> None:
    eps = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert eps.get("arena") == "arena_core.testing.pytest_plugin"


def test_fixtures_register_for_one_test(tmp_path: Path) -> None:
    outcomes = run_nested(tmp_path, NESTED)
    assert outcomes and set(outcomes.values()) == {"passed"}, outcomes
    assert len(outcomes) == 5


def test_the_pytest_plugin_is_import_light() -> None:
    """pytest imports it in every session of every project in this environment."""
    code = (
        "import sys, arena_core.testing, arena_core.testing.pytest_plugin; "
        "print(sorted(m for m in ('torch', 'hydra', 'pydantic', 'arena_core.plugin_loader') "
        "if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"

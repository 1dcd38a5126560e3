"""`arena plugins` as a user runs it: the installed plugins plus broken ones found on PYTHONPATH.

A fake site (conftest.BROKEN) holds a plugin that raises at import, one with a misspelt hook, one
with an unknown hook argument, one that crashes while registering and a healthy one. The
non-strict run (`plugins_listing`, shared by the session) must list all of them and exit 0; the
strict run must fail.
"""

from __future__ import annotations

import argparse

import pytest

from arena_core.cli import cmd_plugins

from .conftest import BROKEN, FakeSite, load_test_plugin, run_cli


def test_broken_plugins_do_not_stop_the_listing(plugins_listing: dict) -> None:
    failures = {f["name"]: f for f in plugins_listing["failures"]}
    for dist, (entry_name, _) in BROKEN.items():
        assert failures[entry_name]["distribution"] == dist
    assert "RuntimeError: boom at import" in failures["a_broken"]["error"]
    assert "did you mean 'register_envs'?" in failures["typo"]["error"]
    assert "settings" in failures["badarg"]["error"]
    assert "ValueError: crash halfway" in failures["crash"]["error"]


def test_healthy_plugins_still_load(plugins_listing: dict) -> None:
    rows = {row["name"]: row for row in plugins_listing["plugins"]}
    good = rows["good"]
    assert (good["distribution"], good["version"], good["error"]) == (
        "arena-test-good",
        "2.3.4",
        None,
    )
    assert good["registered"] == {"rewards": ["testplug_good_reward"]}
    builtins = rows["arena_algorithms"]  # the built-ins come through the same entry points
    assert builtins["distribution"] == "arena-rl" and "grpo" in builtins["registered"]["algorithms"]
    assert "algo/grpo" in builtins["config_options"]
    assert rows["crash"]["registered"] == {}  # nothing half-registered


def test_strict_mode_is_fatal(broken_site: FakeSite) -> None:
    result = run_cli(
        ["arena", "plugins", "--json"],
        pythonpath=[broken_site.path],
        env={"ARENA_STRICT_PLUGINS": "1"},
    )
    assert result.returncode != 0
    assert "plugin 'a_broken' (distribution arena-test-broken)" in result.stderr
    assert "boom at import" in result.stderr and "ARENA_STRICT_PLUGINS" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_table_shows_failures_and_registrations(
    arena_isolated_plugins, register_arena_plugin, capsys: pytest.CaptureFixture[str]
) -> None:
    """The human listing (in-process: the same code the subprocess runs, without the cost)."""
    register_arena_plugin(load_test_plugin("all_hooks"), "all_hooks")
    register_arena_plugin(load_test_plugin("crashes_in_register"), "crash", expect_failure=True)
    arena_isolated_plugins.infos["crash"].distribution = "arena-test-crash"
    assert cmd_plugins.run(argparse.Namespace(json=False)) == 0
    out = " ".join(capsys.readouterr().out.split())  # undo the table's wrapping
    assert "all_hooks" in out and "hooks_env" in out and "hooks_logger" in out
    assert "env/hooks_env" in out
    assert "FAILED" in out
    assert "warning: plugin crash (arena-test-crash) was skipped" in out
    assert "ValueError: crash halfway" in out

"""`arena-run +experiment=atc` where the arena-atc plugin is not installed (a fresh clone after
the README's set-up) says how to install it instead of only "unknown environment"."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from arena_core import plugin_loader as plugins
from arena_core.cli.run import main as arena_run

INSTALL = "pip install -e plugins/arena-atc"


@pytest.fixture
def without_atc(monkeypatch: pytest.MonkeyPatch) -> None:
    """The real plugins of arena-rl itself, and not arena-atc (which this venv may hold)."""
    loaded = plugins.PluginSet()
    for name, module in (
        ("arena_builtins", "arena_core.builtins"),
        ("arena_algorithms", "arena_algorithms.plugin"),
        ("arena_envs", "arena_envs.plugin"),
    ):
        loaded.add(importlib.import_module(module), name)
    assert "atc" not in loaded.registries.envs
    monkeypatch.setattr(plugins, "_PLUGINS", loaded)


def test_the_atc_experiment_says_how_to_install_the_plugin(
    without_atc: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = arena_run(["+experiment=atc", "dry_run=true", f"paths.runs={tmp_path}"])
    err = capsys.readouterr().err
    assert code != 0 and "env.id=atc" in err and INSTALL in err, err
    assert not list(tmp_path.iterdir())  # nothing was created


def test_an_unknown_registered_env_name_says_it_too(without_atc: None) -> None:
    with pytest.raises(KeyError, match=INSTALL):
        plugins.get_plugins().registries.envs.get("atc")

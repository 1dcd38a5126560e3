"""Shared fixtures: model configs written from the public config.json files of each model."""

from __future__ import annotations

from pathlib import Path

import pytest

from arena_core.planner import ModelSpec

CONFIGS = Path(__file__).resolve().parents[2] / "arena_core" / "planner" / "known_configs"


def spec(name: str) -> ModelSpec:
    return ModelSpec.from_hf_config(CONFIGS / name)


# the run config arena-run plans for bench/plan_accuracy.py's SmolLM2 step (2 x 4 x 32 tokens)
SMOLLM2_STEP = {
    "model": {"name_or_path": str(CONFIGS / "smollm2-135m")},
    "hardware": {"name": "cpu", "count": 1},
    "train": {"prompts_per_step": 2},
    "algo": {"group_size": 4},
    "generation": {"max_new_tokens": 32},
    "runtime": {"mode": "sync", "threads": 1},
}


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """No test reads or writes the user's calibration cache, and plans are priced on the stored
    rates (the live probe, arena_core.planner.live, would make figures depend on the load)."""
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ARENA_PLAN_PROBE", "0")


class _BuiltinHardware:
    """Registers the built-in profiles exactly as arena_core.builtins' hook does."""

    from arena_core.hookspecs import hookimpl

    @hookimpl
    def register_hardware(self, register):
        from arena_core.planner.hardware import register_builtin_hardware

        register_builtin_hardware(register)


@pytest.fixture(autouse=True)
def _light_registry(monkeypatch):
    """Lookups still go through a plugin registry, without importing every built-in plugin.

    Loading all entry points imports torch, transformers and the built-in plugins (10-20 s on the
    shared 2-core machine); the planner only needs the hardware registry.
    """
    from arena_core.plugin_loader import PluginSet

    plugins = PluginSet()
    plugins.add(_BuiltinHardware(), "builtin-hardware")
    monkeypatch.setattr("arena_core.plugin_loader.get_plugins", lambda: plugins)

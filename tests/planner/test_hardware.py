"""Hardware profiles: built-in datasheet values, registration through the plugin hook, lookup."""

from __future__ import annotations

import pytest

from arena_core.errors import UnknownNameError
from arena_core.hookspecs import hookimpl
from arena_core.planner import hardware
from arena_core.planner.hardware import (
    BUILTIN_PROFILES,
    HardwareProfile,
    detect_local_profile,
    get_profile,
    profile_for_device_name,
    register_builtin_hardware,
)


def test_builtin_values_from_the_issue():
    p = BUILTIN_PROFILES
    assert (p["h100-80"].memory_gb, p["h100-80"].mem_bandwidth_gbs, p["h100-80"].bf16_tflops) == (
        80,
        3350,
        989,
    )
    assert (p["h200"].memory_gb, p["h200"].mem_bandwidth_gbs) == (141, 4800)
    assert (p["a100-80"].mem_bandwidth_gbs, p["a100-80"].bf16_tflops) == (2040, 312)
    assert p["a100-40"].mem_bandwidth_gbs == 1555 and p["a100-40"].fp8_tflops is None
    assert (p["l40s"].memory_gb, p["l40s"].mem_bandwidth_gbs, p["l40s"].bf16_tflops) == (
        48,
        864,
        362,
    )
    assert (p["b200"].memory_gb, p["b200"].mem_bandwidth_gbs, p["b200"].bf16_tflops) == (
        180,
        7700,
        2250,
    )
    assert (p["mi300x"].memory_gb, p["mi300x"].bf16_tflops) == (192, 1307)
    with pytest.raises(Exception):  # noqa: B017 - frozen pydantic model
        p["h100-80"].memory_gb = 1  # type: ignore[misc]


def test_local_detection_and_device_names():
    local = detect_local_profile()
    assert local.kind in ("cpu", "gpu") and local.memory_gb > 0
    assert profile_for_device_name("NVIDIA H100 80GB HBM3") == "h100-80"
    assert profile_for_device_name("NVIDIA A100-SXM4-40GB", 40.0) == "a100-40"
    assert profile_for_device_name("AMD Instinct MI300X") == "mi300x"
    assert profile_for_device_name("Some Future GPU") is None


def test_register_builtin_hardware_registers_every_profile():
    seen = {}
    register_builtin_hardware(lambda name, obj, description="": seen.__setitem__(name, obj))
    assert set(BUILTIN_PROFILES) | {"cpu"} == set(seen)
    assert all(isinstance(v, HardwareProfile) for v in seen.values())


def test_lookup_goes_through_the_registry_so_third_party_profiles_work(monkeypatch):
    from arena_core.plugin_loader import PluginSet

    class ThirdParty:
        @hookimpl
        def register_hardware(self, register):
            register(
                "my-accel",
                HardwareProfile(
                    name="my-accel",
                    memory_gb=64,
                    mem_bandwidth_gbs=2000,
                    bf16_tflops=400,
                    intra_node_gbs=100,
                    inter_node_gbs=25,
                ),
            )

    class Builtins:
        @hookimpl
        def register_hardware(self, register):
            register_builtin_hardware(register)

    plugins = PluginSet()
    plugins.add(Builtins(), "builtins-test")
    plugins.add(ThirdParty(), "third-party")
    monkeypatch.setattr("arena_core.plugin_loader.get_plugins", lambda: plugins)
    assert get_profile("my-accel").memory_gb == 64
    assert get_profile("h100-80") is BUILTIN_PROFILES["h100-80"]
    with pytest.raises(UnknownNameError, match="did you mean 'h100-80'"):
        get_profile("h100-8")


def test_cpu_profile_uses_calibrated_rates(monkeypatch):
    cpu = hardware.cpu_profile(cores=2, memory_gb=24, matmul_tflops=0.05, mem_bandwidth_gbs=12)
    assert (cpu.kind, cpu.devices_per_node, cpu.dtype_bytes, cpu.peak_flops) == ("cpu", 1, 4, 5e10)

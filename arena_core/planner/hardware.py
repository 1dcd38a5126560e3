"""Hardware profiles: what one device can hold and how fast it computes and moves bytes.

A profile is plain data: the planner's memory and cost models read it, the calibration store adds
measured efficiencies on top (``arena_core.planner.calibrate``). Built-ins are registered through the
``register_hardware`` hook like any third party's profile, so a plugin can ship ``my-tpu`` and
``hardware=my-tpu`` works; lookups go through the registry (``get_profile``).

Numbers are vendor datasheet figures for dense (no 2:4 sparsity) math:

* H100 SXM5 80 GB: 3.35 TB/s HBM3, 989 TFLOP/s bf16, 1,979 fp8; NVLink 4 900 GB/s bidirectional.
* H200 SXM 141 GB: 4.8 TB/s HBM3e; same compute as H100.
* A100 SXM 80 GB / 40 GB: 2.04 / 1.555 TB/s, 312 TFLOP/s bf16, no fp8; NVLink 3 600 GB/s.
* L40S 48 GB: 864 GB/s GDDR6, 362 TFLOP/s bf16, 733 fp8; PCIe Gen4 x16, no NVLink.
* B200 180 GB (DGX B200): 7.7 TB/s HBM3e, 2,250 TFLOP/s bf16, 4,500 fp8; NVLink 5 1.8 TB/s.
* MI300X 192 GB: 5.3 TB/s HBM3, 1,307 TFLOP/s bf16, 2,615 fp8; Infinity Fabric 896 GB/s.

Link bandwidths here are per device and per direction (half the bidirectional marketing figure),
because a ring all-gather or a broadcast moves bytes one way per link. Inter-node figures assume one
400 Gb/s NIC per GPU (50 GB/s), 200 Gb/s (25 GB/s) for A100-era and PCIe boxes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from arena_core.errors import ArenaError
from arena_core.machine import usable_cores, usable_memory_bytes
from arena_core.planner.coefficients import effective_calibration


class HardwareProfile(BaseModel):
    """One kind of accelerator (or the CPU), as the planner sees it.

    ``bf16_tflops`` is the dense peak the cost model divides FLOPs by; for the ``cpu`` profile it is
    the measured fp32 matmul rate (the CPU path trains in fp32), which is why calibration matters
    most there.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    memory_gb: float = Field(gt=0, description="memory per device (GB, 1e9 bytes)")
    mem_bandwidth_gbs: float = Field(gt=0, description="device memory bandwidth, GB/s")
    bf16_tflops: float = Field(gt=0, description="dense bf16 peak, TFLOP/s (cpu: measured fp32)")
    fp8_tflops: float | None = Field(default=None, description="dense fp8 peak, TFLOP/s")
    intra_node_gbs: float = Field(gt=0, description="device-to-device, per direction, GB/s")
    inter_node_gbs: float = Field(gt=0, description="per device across nodes, per direction, GB/s")
    devices_per_node: int = Field(default=8, ge=1)
    kind: Literal["gpu", "cpu"] = "gpu"
    host_link_gbs: float = Field(default=25.0, gt=0, description="device<->host (PCIe), GB/s")
    host_memory_gb: float = Field(default=1024.0, gt=0, description="host RAM per node for offload")
    cores: int | None = Field(default=None, description="CPU cores (cpu profile only)")
    description: str = ""

    @property
    def peak_flops(self) -> float:
        """Dense peak in FLOP/s (the unit the cost model works in)."""
        return self.bf16_tflops * 1e12

    @property
    def dtype_bytes(self) -> int:
        """Bytes per weight/activation element: bf16 on accelerators, fp32 on the CPU path."""
        return 4 if self.kind == "cpu" else 2


def _gpu(
    name: str,
    mem: float,
    bw_tbs: float,
    bf16: float,
    fp8: float | None,
    nvlink_bidir: float,
    inter: float = 50.0,
    host_link: float = 25.0,
    desc: str = "",
) -> HardwareProfile:
    return HardwareProfile(
        name=name,
        memory_gb=mem,
        mem_bandwidth_gbs=round(bw_tbs * 1000, 3),
        bf16_tflops=bf16,
        fp8_tflops=fp8,
        intra_node_gbs=nvlink_bidir / 2,
        inter_node_gbs=inter,
        devices_per_node=8,
        kind="gpu",
        host_link_gbs=host_link,
        description=desc,
    )


BUILTIN_PROFILES: dict[str, HardwareProfile] = {
    "h100-80": _gpu("h100-80", 80, 3.35, 989, 1979, 900, desc="NVIDIA H100 SXM5 80 GB"),
    "h200": _gpu("h200", 141, 4.8, 989, 1979, 900, desc="NVIDIA H200 SXM 141 GB"),
    "a100-80": _gpu(
        "a100-80", 80, 2.04, 312, None, 600, inter=25, host_link=25, desc="NVIDIA A100 SXM4 80 GB"
    ),
    "a100-40": _gpu(
        "a100-40", 40, 1.555, 312, None, 600, inter=25, host_link=25, desc="NVIDIA A100 SXM4 40 GB"
    ),
    # PCIe Gen4 x16: 64 GB/s bidirectional, and no NVLink: peers talk over PCIe.
    "l40s": _gpu(
        "l40s", 48, 0.864, 362, 733, 64, inter=25, host_link=25, desc="NVIDIA L40S 48 GB (PCIe)"
    ),
    "b200": _gpu(
        "b200", 180, 7.7, 2250, 4500, 1800, inter=50, host_link=50, desc="NVIDIA B200 180 GB"
    ),
    "mi300x": _gpu(
        "mi300x",
        192,
        5.3,
        1307,
        2615,
        896,
        inter=50,
        host_link=50,
        desc="AMD Instinct MI300X 192 GB",
    ),
}

# CPU fallbacks when nothing was calibrated: ~50 GFLOP/s fp32 matmul on 2 AVX-512 cores and
# ~12 GB/s copy bandwidth were measured on the development machine (DESIGN section 9 hardware).
_CPU_GFLOPS_PER_CORE = 25.0
_CPU_BANDWIDTH_GBS = 12.0


def cpu_profile(
    cores: int | None = None,
    memory_gb: float | None = None,
    matmul_tflops: float | None = None,
    mem_bandwidth_gbs: float | None = None,
) -> HardwareProfile:
    """The CPU as one device: the RAM and cores this process may use (a container's limits
    included: `arena_core.machine`) and (when calibrated) its measured rates.

    Missing measurements come from the calibration store for ``cpu`` when one exists, else from
    per-core defaults, so planning never runs a benchmark by itself.
    """
    cores = cores or usable_cores()
    if memory_gb is None:
        memory_gb = usable_memory_bytes() / 1e9
    if matmul_tflops is None or mem_bandwidth_gbs is None:
        measured = _calibrated_rates("cpu")
        matmul_tflops = matmul_tflops or measured.get("matmul_tflops")
        mem_bandwidth_gbs = mem_bandwidth_gbs or measured.get("mem_bandwidth_gbs")
    return HardwareProfile(
        name="cpu",
        memory_gb=memory_gb,
        mem_bandwidth_gbs=mem_bandwidth_gbs or _CPU_BANDWIDTH_GBS,
        bf16_tflops=matmul_tflops or cores * _CPU_GFLOPS_PER_CORE / 1000,
        fp8_tflops=None,
        intra_node_gbs=mem_bandwidth_gbs or _CPU_BANDWIDTH_GBS,
        inter_node_gbs=1.25,
        devices_per_node=1,
        kind="cpu",
        host_link_gbs=1000.0,
        host_memory_gb=memory_gb,
        cores=cores,
        description=f"this machine's CPU ({cores} cores, {memory_gb:.0f} GB RAM)",
    )


def split_cpu(profile: HardwareProfile, count: int) -> HardwareProfile:
    """The CPU as ``count`` devices (``hardware=cpu hardware.count=N``): each gets an equal share
    of the cores, compute, memory bandwidth and RAM, so a split plan (a trainer process beside an
    engine process) is priced on the share each process really gets, not on the whole machine."""
    if count <= 1:
        return profile
    cores = profile.cores or 1
    if count > cores:
        from arena_core.errors import ConfigError

        raise ConfigError(
            f"hardware.count={count}: the '{profile.name}' profile splits this machine's {cores} "
            f"CPU cores into at most {cores} devices (one core each); use hardware.count<={cores}"
        )
    return profile.model_copy(
        update={
            "memory_gb": profile.memory_gb / count,
            "mem_bandwidth_gbs": profile.mem_bandwidth_gbs / count,
            "bf16_tflops": profile.bf16_tflops / count,
            "devices_per_node": count,
            "cores": cores // count,
            "description": f"{profile.description}, as {count} devices of {cores // count} core(s)",
        }
    )


def _calibrated_rates(profile: str) -> dict[str, float]:
    """Measured rates of this machine's calibration, else of the shipped one: the shipped
    efficiencies were fitted against its own measured peak, so the two go together."""
    cal = effective_calibration(profile)
    return dict(cal.measured) if cal is not None else {}


# -- detection ----------------------------------------------------------------------------------
_NAME_PATTERNS: tuple[tuple[str, str], ...] = (
    (r"H200", "h200"),
    (r"H100", "h100-80"),
    (r"B200", "b200"),
    (r"MI300X", "mi300x"),
    (r"L40S", "l40s"),
)


def profile_for_device_name(device_name: str, memory_gb: float | None = None) -> str | None:
    """Map a CUDA/ROCm device name (``NVIDIA H100 80GB HBM3``) to a built-in profile name."""
    for pattern, name in _NAME_PATTERNS:
        if re.search(pattern, device_name, re.IGNORECASE):
            return name
    if re.search(r"A100", device_name, re.IGNORECASE):
        if memory_gb is not None:
            return "a100-80" if memory_gb > 50 else "a100-40"
        return "a100-40" if "40" in device_name else "a100-80"
    return None


def detect_local_profile() -> HardwareProfile:
    """The profile of this machine: the first CUDA device when there is one, else the CPU.

    An unknown GPU gets a profile built from what torch reports (memory) with A100-like rates,
    renamed after the device so calibration can store coefficients for it.
    """
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            mem_gb = props.total_memory / 1e9
            known = profile_for_device_name(props.name, mem_gb)
            if known is not None:
                return BUILTIN_PROFILES[known]
            slug = re.sub(r"[^a-z0-9]+", "-", props.name.lower()).strip("-") or "gpu"
            base = BUILTIN_PROFILES["a100-80"]
            return base.model_copy(
                update={
                    "name": slug,
                    "memory_gb": round(mem_gb, 1),
                    "description": f"detected {props.name}",
                }
            )
    except Exception:  # noqa: BLE001 - a broken CUDA install still leaves the CPU
        pass
    return cpu_profile()


# -- registration and lookup -------------------------------------------------------------------
def register_builtin_hardware(register: Callable[..., None]) -> None:
    """Register the built-in profiles (called by ``arena_core.builtins``' register_hardware hook).

    ``cpu`` is registered as a factory-free snapshot of this machine, refreshed on lookup by
    ``get_profile`` so calibrated rates written after import are used.
    """
    for name, profile in BUILTIN_PROFILES.items():
        register(name, profile, description=profile.description)
    register(
        "cpu", cpu_profile(), description="this machine's CPU (calibrate: arena plan --calibrate)"
    )


def get_profile(name: str) -> HardwareProfile:
    """Look a profile up by name through the plugin registry, so third-party profiles work.

    ``cpu`` and ``local`` always describe this machine as it is now. Falls back to the built-ins
    only when the plugin registry cannot be loaded (unit tests without an installed package).
    """
    if name == "local":
        return detect_local_profile()
    if name == "cpu":
        return cpu_profile()
    registry: Any = None
    try:
        from arena_core.plugin_loader import get_plugins

        registry = get_plugins().registries.hardware
    except Exception:  # noqa: BLE001 - registry not loadable: fall back below
        registry = None
    if registry is not None and len(registry):
        obj = registry.get(name).obj  # raises UnknownNameError with "did you mean"
        if not isinstance(obj, HardwareProfile):
            if isinstance(obj, dict):
                return HardwareProfile(**obj)
            raise ArenaError(
                f"hardware profile '{name}' is a {type(obj).__name__}, not a "
                "HardwareProfile: the plugin that registered it must pass one"
            )
        return obj
    if name in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name]
    from arena_core.errors import UnknownNameError, did_you_mean

    known = sorted([*BUILTIN_PROFILES, "cpu", "local"])
    raise UnknownNameError(
        f"unknown hardware profile '{name}'{did_you_mean(name, known)} "
        f"Installed: {', '.join(known)}."
    )

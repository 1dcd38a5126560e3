"""Which device a run uses, and every choice that follows from it, in one place.

`runtime.device` is `auto`, `cpu` or `cuda` (or `cuda:N`). `auto` picks CUDA when torch sees a
GPU. Everything that differs between a CPU and a GPU run is decided here by small pure functions
(given the device and the plan), so the loop, the learner and the engines never test
`torch.cuda.is_available()` themselves and each branch can be unit-tested on a CPU:

* weights dtype: bf16 on a GPU that supports it, fp32 on the CPU (exact, and fastest there at the
  sizes a CPU trains); `model.dtype` pins it.
* autocast: bf16 autocast on CUDA when the weights are kept in fp32 (a pinned `model.dtype=float32`
  or a plan that keeps fp32 masters); never on the CPU.
* fused logprob: the Triton kernel on CUDA, the chunked torch path elsewhere.
* generation KV cache: static (preallocated, fixed shapes) on CUDA, dynamic on the CPU.
* torch.distributed backend: NCCL on CUDA, gloo on the CPU.

It sits at the bottom of the layers (arena_core/device.py, beside errors.py) so the learner, the
engines, the Ray actors and the loops all reach it without importing each other.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

from arena_core.errors import ConfigError

DEVICES = ("auto", "cpu", "cuda")


def cuda_available() -> bool:
    """Whether torch can use a CUDA device here (False on CPU-only builds)."""
    return bool(torch.cuda.is_available())


def resolve_device(
    requested: str | None, *, has_cuda: bool | None = None, key: str = "runtime.device"
) -> str:
    """`auto` -> `cuda` when a GPU is present, else `cpu`; `cuda` without a GPU is an error
    naming `key` (the config key or flag the user set).

    `has_cuda` overrides detection (tests exercise both answers on one machine)."""
    name = str(requested or "auto").strip().lower()
    gpu = cuda_available() if has_cuda is None else has_cuda
    if name == "auto":
        return "cuda" if gpu else "cpu"
    if name == "cpu":
        return "cpu"
    if name == "cuda" or name.startswith("cuda:"):
        if not gpu:
            raise ConfigError(
                f"{key}={name}: torch sees no CUDA device here (torch "
                f"{torch.__version__}). Use {key}=cpu (or auto), or install a CUDA "
                "build of torch on a machine with a GPU."
            )
        return name
    raise ConfigError(
        f"{key}={name!r} is not a device: use one of {', '.join(DEVICES)} (or cuda:N)"
    )


def is_cuda(device: str | torch.device) -> bool:
    return torch.device(device).type == "cuda"


def weights_dtype(device: str, requested: str = "auto", *, bf16_ok: bool | None = None) -> str:
    """The dtype the policy's weights are kept in: `model.dtype` when pinned, else bf16 on a GPU
    that supports it and fp32 on the CPU."""
    if requested != "auto":
        return requested
    if not is_cuda(device):
        return "float32"
    ok = torch.cuda.is_bf16_supported() if bf16_ok is None else bf16_ok
    return "bfloat16" if ok else "float32"


def use_autocast(device: str, weights: str) -> bool:
    """bf16 autocast for the learner's forward: only on CUDA and only with fp32 weights (bf16
    weights already compute in bf16; CPU autocast is slower than fp32 at CPU sizes)."""
    return is_cuda(device) and weights == "float32"


def triton_usable(device: torch.device) -> bool:
    """Whether the Triton row ops can run on ``device`` (CUDA, or any device when interpreted).
    The kernels' own checks (arena_core.kernels.fused_logprob) ask the same question here."""
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return device.type == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"


def logprob_impl(device: str, *, triton_ok: bool | None = None) -> str:
    """Which fused-logprob implementation the learner's head uses on `device`."""
    if not is_cuda(device):
        return "torch"
    if triton_ok is None:
        triton_ok = triton_usable(torch.device(device))
    return "triton" if triton_ok else "torch"


def kv_cache_kind(device: str) -> str:
    """`static` on CUDA (fixed shapes: no reallocation per token, graph-capturable), `dynamic` on
    the CPU (finished rows leave the cache, which saves work there)."""
    return "static" if is_cuda(device) else "dynamic"


def dist_backend(device: str) -> str:
    """torch.distributed backend for trainer ranks on `device`."""
    return "nccl" if is_cuda(device) else "gloo"


@dataclass(frozen=True)
class DevicePlan:
    """Every device-dependent choice of one run (recorded in the run's plan.json)."""

    device: str
    dtype: str
    autocast: bool
    logprob_impl: str
    kv_cache: str
    dist_backend: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def device_plan(
    requested: str | None = "auto", dtype: str = "auto", *, has_cuda: bool | None = None
) -> DevicePlan:
    """Resolve `runtime.device` and `model.dtype` into a DevicePlan."""
    device = resolve_device(requested, has_cuda=has_cuda)
    bf16_ok = None if has_cuda is None else has_cuda
    weights = weights_dtype(device, dtype, bf16_ok=bf16_ok)
    triton_ok = None if has_cuda is None else has_cuda
    return DevicePlan(
        device=device,
        dtype=weights,
        autocast=use_autocast(device, weights),
        logprob_impl=logprob_impl(device, triton_ok=triton_ok),
        kv_cache=kv_cache_kind(device),
        dist_backend=dist_backend(device),
    )


def autocast(device: str, enabled: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast on `device` when `enabled`, else nothing."""
    if enabled:
        return torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (CPU for a module without parameters)."""
    return next((p.device for p in module.parameters()), torch.device("cpu"))


def tensors_to(obj: Any, device: torch.device) -> Any:
    """A copy of a dataclass (a MicroBatch) with its tensor fields on `device`; the object itself
    when they are there already (the CPU path copies nothing)."""
    moved = {
        name: value.to(device, non_blocking=True)
        for name, value in vars(obj).items()
        if isinstance(value, torch.Tensor) and value.device != device
    }
    return replace(obj, **moved) if moved else obj

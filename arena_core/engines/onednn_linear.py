"""Decode-time linear layers through oneDNN on CPU: the same fp32 product, a faster kernel.

Why: torch's fp32 `F.linear` on CPU calls MKL's sgemm, which on AMD CPUs runs a narrower code
path. On an AMD EPYC (AVX-512) oneDNN's fp32 inner product was ~1.9x faster at 32 rows (~190 vs
~100 GFLOPS on one thread) and ~1.3x at 4-8 rows; at 1-2 rows or on tiny matrices its per-call
overhead makes it slower, so those stay on `F.linear` (`MIN_ROWS`, `MIN_WEIGHT`). Measured on
bench/population.py's 50M model: a 32-row decode batch 1.7x faster, 8 four-row batches 1.4x.
On Intel CPUs MKL takes its best path and wins instead (a Xeon with AVX-512, SmolLM2's shapes
at 64 rows, two threads: MKL 126-139 GFLOPS against oneDNN's 93-115), so the switch is on only
for AMD (`ENABLED`). The results are the same product in another summation order (relative
differences ~1e-6, as between any two BLAS builds).

Only inside `onednn_linears(model)` and only in the thread that entered it, without autograd
(the decode loop runs under `no_grad`), for float32 tensors on CPU, and only plain `nn.Linear`
modules (subclasses such as quantized linears keep their own forward). A learner thread training
the same module meanwhile always gets `F.linear`, so its numbers never depend on timing.
`torch.backends.mkldnn.enabled = False` turns it off.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from arena_core.engines.thread_forwards import ThreadForwards

MIN_ROWS = 4  # fewer rows: oneDNN's per-call overhead outweighs its faster kernel
MIN_WEIGHT = 1 << 18  # smaller weights (in x out, e.g. 256 x 768): no faster, so F.linear


def _kernel() -> Any:
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return None


def _cpu_vendor() -> str:
    """The CPU's vendor id (`AuthenticAMD`, `GenuineIntel`, ...), or "" where it cannot be read."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("vendor_id"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


_LINEAR = _kernel()
# oneDNN's kernel only where MKL's sgemm is the slower one (see the module doc)
ENABLED = _LINEAR is not None and _cpu_vendor() == "AuthenticAMD"
# model -> (MIN_WEIGHT, its large plain nn.Linear modules)
_targets: weakref.WeakKeyDictionary[nn.Module, tuple[int, list[nn.Linear]]] = (
    weakref.WeakKeyDictionary()
)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN when it is the faster kernel (see module doc)."""
    if (
        ENABLED
        and _FORWARDS.active()
        and x.dtype is torch.float32
        and weight.dtype is torch.float32
        and x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and type(x) is torch.Tensor
        and x.dim() >= 2
        and (bias is None or bias.dtype is torch.float32)
    ):
        return decode_kernel(x, weight, bias)
    return F.linear(x, weight, bias)


def decode_kernel(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None
) -> torch.Tensor:
    """The kernel a decode-thread fp32 linear of these shapes runs on this CPU, with no block
    needed: what `planner.microbench` times, without building a module."""
    if (
        ENABLED
        and x.numel() >= MIN_ROWS * x.shape[-1]
        and weight.numel() >= MIN_WEIGHT
        and weight.is_contiguous()
    ):
        return _LINEAR(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


_FORWARDS = ThreadForwards(_forward)


@contextmanager
def onednn_linears(model: nn.Module) -> Iterator[None]:
    """Route `model`'s large plain `nn.Linear` layers through `linear` in this thread.

    Re-entrant and safe with several threads (`ThreadForwards`). The large linears are found at
    the model's first block (a decode step calls this every step); a linear added to the model
    later keeps `F.linear`, which is slower, never wrong.
    """
    if not ENABLED or not torch.backends.mkldnn.enabled:
        yield
        return
    found = _targets.get(model)
    if found is None or found[0] != MIN_WEIGHT:  # walked once per model: the walk costs more
        found = _targets[model] = (  # than a decode step's matmuls on small models
            MIN_WEIGHT,
            [m for m in model.modules() if type(m) is nn.Linear and m.weight.numel() >= MIN_WEIGHT],
        )
    with _FORWARDS.block(model, found[1]):
        yield

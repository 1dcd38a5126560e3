"""Decode-time linear layers through oneDNN on CPU: the same fp32 product, a faster kernel.

Why: torch's fp32 `F.linear` on CPU calls MKL's sgemm, which on AMD CPUs runs a narrower code
path. On this project's machine (AMD EPYC, AVX-512) oneDNN's fp32 inner product is ~1.9x faster at
32 rows (~190 vs ~100 GFLOPS on one thread) and ~1.3x at 4-8 rows; at 1-2 rows or on tiny
matrices its per-call overhead makes it slower, so those stay on `F.linear` (`MIN_ROWS`,
`MIN_WEIGHT`). Measured on bench/population.py's 50M model: a 32-row decode batch 1.7x faster,
8 four-row batches 1.4x. The results are the same product in another summation order (relative
differences ~1e-6, as between any two BLAS builds).

Only inside `onednn_linears(model)` and only in the thread that entered it, without autograd
(the decode loop runs under `no_grad`), for float32 tensors on CPU, and only plain `nn.Linear`
modules (subclasses such as quantized linears keep their own forward). A learner thread training
the same module meanwhile always gets `F.linear`, so its numbers never depend on timing.
`torch.backends.mkldnn.enabled = False` turns it off.
"""

from __future__ import annotations

import threading
import types
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

MIN_ROWS = 4  # fewer rows: oneDNN's per-call overhead outweighs its faster kernel
MIN_WEIGHT = 1 << 18  # smaller weights (in x out, e.g. 256 x 768): no faster, so F.linear


def _kernel() -> Any:
    try:
        if not torch.backends.mkldnn.is_available():
            return None
        return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return None


_LINEAR = _kernel()
_local = threading.local()  # depth: how many onednn_linears blocks this thread is inside
_lock = threading.Lock()
_installed: dict[int, list[Any]] = {}  # id(model) -> [users, patched modules]
# model -> (MIN_WEIGHT, its large plain nn.Linear modules)
_targets: weakref.WeakKeyDictionary[nn.Module, tuple[int, list[nn.Linear]]] = (
    weakref.WeakKeyDictionary()
)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`F.linear(x, weight, bias)`, through oneDNN when it is the faster kernel (see module doc)."""
    if (
        _LINEAR is not None
        and getattr(_local, "depth", 0)
        and x.dtype is torch.float32
        and weight.dtype is torch.float32
        and x.device.type == "cpu"
        and not torch.is_grad_enabled()
        and type(x) is torch.Tensor
        and x.dim() >= 2
        and x.numel() >= MIN_ROWS * x.shape[-1]
        and weight.numel() >= MIN_WEIGHT
        and weight.is_contiguous()
        and (bias is None or bias.dtype is torch.float32)
    ):
        return _LINEAR(x, weight, bias, "none", [], "")
    return F.linear(x, weight, bias)


def _forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, self.weight, self.bias)


@contextmanager
def onednn_linears(model: nn.Module) -> Iterator[None]:
    """Route `model`'s large plain `nn.Linear` layers through `linear` in this thread.

    Re-entrant and safe with several threads: the forwards are patched on the modules while at
    least one thread is inside a block for this model, and each thread's own flag decides. The
    large linears are found at the model's first block (a decode step calls this every step); a
    linear added to the model later keeps `F.linear`, which is slower, never wrong.
    """
    if _LINEAR is None or not torch.backends.mkldnn.enabled:
        yield
        return
    key = id(model)
    with _lock:
        entry = _installed.get(key)
        if entry is None:
            found = _targets.get(model)
            if found is None or found[0] != MIN_WEIGHT:  # walked once per model: the walk costs
                found = _targets[model] = (  # more than a decode step's matmuls on small models
                    MIN_WEIGHT,
                    [
                        m
                        for m in model.modules()
                        if type(m) is nn.Linear and m.weight.numel() >= MIN_WEIGHT
                    ],
                )
            mods = [m for m in found[1] if "forward" not in m.__dict__]  # keep others' overrides
            for m in mods:
                m.__dict__["forward"] = types.MethodType(_forward, m)
            entry = _installed[key] = [0, mods]
        entry[0] += 1
    _local.depth = getattr(_local, "depth", 0) + 1
    try:
        yield
    finally:
        _local.depth -= 1
        with _lock:
            entry[0] -= 1
            if entry[0] == 0:
                for m in entry[1]:
                    m.__dict__.pop("forward", None)
                del _installed[key]

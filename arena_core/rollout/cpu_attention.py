"""A decode step's attention over a bf16 KV cache on the CPU, through a small C kernel.

Why: a decode step's attention reads the whole KV cache of every row, and on a real model that
is most of its bytes (SmolLM2, 64 rows at ~300 positions: ~0.7 GB of fp32 cache a step, more
than the bf16 weights). A bf16 cache halves them, but torch's CPU `bmm` is slower in bf16 than
in fp32 at these shapes (3 query heads against a few hundred positions), so through torch ops
the smaller cache gained nothing. `csrc/decode_attention.c` reads each key and value once per
KV head, widens bf16 to fp32 in registers and keeps scores, softmax and the weighted sum in
fp32: at 64 rows x 300 positions ~1.5x the fp32 `bmm` attention, ~1.3x a whole bf16 decode at
128 new tokens (`bench/real_model.py`, docs/real-models.md). Its OpenMP threads are torch's own
(the library resolves to the libgomp torch loaded), so it never competes with torch's pool.

The kernel is compiled once per machine with the host's C compiler (`cc -O3 -march=native
-fopenmp`, ~1 s) into `$ARENA_CACHE_DIR/kernels/` (keyed by the source, the flags, the compiler
and the CPU) and loaded with ctypes. No compiler, a failed build, a non-x86/ARM CPU or
`ARENA_CPU_KERNELS=0`: `available()` is False and the decode keeps its fp32 cache and torch's
`bmm` path (`decode_cache.decode_step_attention`), slower, never wrong.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "decode_attention.c"
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
_DTYPES = {torch.float32: 0, torch.bfloat16: 1}
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_tried = False


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _compiler() -> str | None:
    cc = os.environ.get("CC") or "cc"
    return shutil.which(cc) or shutil.which("gcc")


def _build(cc: str) -> Path:
    """The kernel's shared library for this source, compiler and CPU; built once, atomically."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    key = hashlib.sha256(
        "\n".join([SOURCE.read_text(), " ".join(FLAGS), version, _cpu_name()]).encode()
    ).hexdigest()[:16]
    root = Path(os.environ.get("ARENA_CACHE_DIR") or Path.home() / ".cache" / "arena") / "kernels"
    target = root / f"decode_attention-{key}.so"
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [cc, *FLAGS, "-o", str(out), str(SOURCE)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-2000:] or f"{cc} exited {done.returncode}")
        os.replace(out, target)
    return target


def _load() -> ctypes.CDLL | None:
    global _lib, _tried
    with _lock:
        if _tried:
            return _lib
        _tried = True
        if os.environ.get("ARENA_CPU_KERNELS", "1") == "0":
            return None
        if platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"):
            return None
        cc = _compiler()
        if cc is None:
            log.info("no C compiler: the bf16 decode keeps an fp32 KV cache (torch's bmm)")
            return None
        try:
            lib = ctypes.CDLL(str(_build(cc)))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("the CPU decode-attention kernel did not build (%s); using torch's", exc)
            return None
        fn = lib.arena_decode_attention
        i64, ptr = ctypes.c_int64, ctypes.c_void_p
        fn.argtypes = [ptr] * 5 + [i64] * 12 + [ptr] + [i64] * 4
        fn.argtypes += [ctypes.c_float, ctypes.c_int, ctypes.c_int]
        fn.restype = ctypes.c_int
        _lib = lib
        return _lib


def available() -> bool:
    """Whether the kernel is built and loaded on this machine (builds it on first call)."""
    return _load() is not None


def runs(head_dim: int) -> bool:
    """Whether a model with heads of `head_dim` decodes through the kernel here (it works in
    blocks of 64 dimensions: SmolLM2, Qwen2, Llama and Mistral have 64 or 128)."""
    return head_dim > 0 and head_dim % 64 == 0 and available()


def attention(
    query: torch.Tensor,
    keys_t: torch.Tensor,
    values: torch.Tensor,
    bias: torch.Tensor | None,
    scale: float,
    staged: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Attention of one position per row: [rows, heads * dim] fp32, or None where the kernel
    cannot run this call (not built, a head size that is not a multiple of 64, another dtype,
    a tensor not on the CPU); the caller then takes torch's path.

    `query` [rows, heads, 1, dim] fp32; `keys_t` [rows, kv_heads, dim, n] (the cache's
    transposed keys of the first n positions), `staged` [rows, kv_heads, m, dim] (the next m
    positions' keys, not yet transposed; None: m = 0) and `values` [rows, kv_heads, n + m, dim],
    fp32 or bf16, any strides with the last dimension contiguous; `bias` additive,
    broadcastable as [rows, n + m] (0 attends, -inf does not) or None.
    """
    lib = _load()
    code = _DTYPES.get(keys_t.dtype)
    rows, heads, _, dim = query.shape
    kv, main = keys_t.shape[1], keys_t.shape[-1]
    more = 0 if staged is None else staged.shape[2]
    length = main + more
    if (
        lib is None
        or code is None
        or values.dtype != keys_t.dtype
        or (staged is not None and (staged.dtype != keys_t.dtype or staged.stride(-1) != 1))
        or values.shape[2] != length
        or dim % 64
        or heads % kv
        or query.device.type != "cpu"
        or keys_t.stride(-1) != 1
        or values.stride(-1) != 1
    ):
        return None
    q = query.reshape(rows, heads, dim).float().contiguous()
    flat = None
    if bias is not None:
        flat = bias.reshape(rows, -1).float()
        if flat.shape[1] < length or flat.stride(-1) != 1:
            return None
    out = torch.empty(rows, heads * dim, dtype=torch.float32)
    failed = lib.arena_decode_attention(
        q.data_ptr(),
        keys_t.data_ptr(),
        values.data_ptr(),
        None if flat is None else flat.data_ptr(),
        out.data_ptr(),
        rows,
        kv,
        heads // kv,
        dim,
        main,
        keys_t.stride(0),
        keys_t.stride(1),
        keys_t.stride(2),
        values.stride(0),
        values.stride(1),
        values.stride(2),
        0 if flat is None else flat.stride(0),
        None if staged is None else staged.data_ptr(),
        more,
        0 if staged is None else staged.stride(0),
        0 if staged is None else staged.stride(1),
        0 if staged is None else staged.stride(2),
        scale,
        code,
        torch.get_num_threads(),
    )
    return None if failed else out

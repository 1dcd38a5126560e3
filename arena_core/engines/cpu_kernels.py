"""The CPU decode's C kernels: compiled once per machine, loaded with ctypes.

Why C: a bf16 decode step on a CPU is a few hundred small torch ops, and on a real model the
ones that do little math (attention over the KV cache, RMSNorm, the casts between fp32 and bf16)
cost as much as the products: each op pays its dispatch, a fork/join of torch's threads and its
own pass over memory. `csrc/` holds the few loops that replace them (`cpu_attention.py`,
`decode_glue.py` say what each gains).

Each source is compiled with the host's compiler (`cc -O3 -march=native -fopenmp`, ~1 s) into
`$ARENA_CACHE_DIR/kernels/`, keyed by the source and its shared header (`csrc/simd.h`), the
flags, the compiler and the CPU, written
atomically (a concurrent build by another process is harmless), and loaded with ctypes. Their
OpenMP threads are torch's own pool: the library's libgomp resolves to the one torch loaded, so
a kernel never competes with torch's spinning workers (with its own threads it ran slower on
two threads than on one). No compiler, a failed build, another CPU architecture or
`ARENA_CPU_KERNELS=0`: `library()` answers None and the decode keeps torch's ops.
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

from arena_core.store.home import arena_home

log = logging.getLogger(__name__)

CSRC = Path(__file__).with_name("csrc")
FLAGS = ("-O3", "-march=native", "-fopenmp", "-shared", "-fPIC")
_lock = threading.Lock()
_libs: dict[str, ctypes.CDLL | None] = {}


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


def _build(cc: str, source: Path) -> Path:
    """The shared library of `source` for this compiler and CPU; built once, atomically."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
    # the headers next to the sources (simd.h) are part of every kernel: an edit to one rebuilds
    headers = [h.read_text() for h in sorted(source.parent.glob("*.h"))]
    key = hashlib.sha256(
        "\n".join([source.read_text(), *headers, " ".join(FLAGS), version, _cpu_name()]).encode()
    ).hexdigest()[:16]
    root = arena_home() / "kernels"
    target = root / f"{source.stem}-{key}.so"
    if target.is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        out = Path(tmp) / target.name
        done = subprocess.run(
            [cc, *FLAGS, "-o", str(out), str(source)], capture_output=True, text=True, timeout=120
        )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.strip()[-2000:] or f"{cc} exited {done.returncode}")
        os.replace(out, target)
    return target


def library(name: str) -> ctypes.CDLL | None:
    """The loaded kernel library `csrc/<name>.c` (built on first use), or None where it cannot
    run here (see the module doc)."""
    with _lock:
        if name in _libs:
            return _libs[name]
        _libs[name] = None
        if os.environ.get("ARENA_CPU_KERNELS", "1") == "0":
            return None
        if platform.machine().lower() not in ("x86_64", "amd64", "aarch64", "arm64"):
            return None
        cc = _compiler()
        if cc is None:
            log.info("no C compiler: the CPU decode keeps torch's ops")
            return None
        try:
            _libs[name] = ctypes.CDLL(str(_build(cc, CSRC / f"{name}.c")))
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            log.warning("the CPU kernel %s did not build (%s); using torch's ops", name, exc)
        return _libs[name]


def forget() -> None:
    """Drop the loaded libraries' handles so the next `library()` looks again (tests that
    switch `ARENA_CPU_KERNELS`)."""
    with _lock:
        _libs.clear()

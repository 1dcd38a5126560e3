"""This machine's own rates, probed once: what the shipped CPU calibration cannot know.

Why: the shipped calibration (calibrations/cpu.json) was fitted on one development machine. Its
efficiencies (fractions of a measured peak) travel well; its peak and its bandwidth do not. On
an Intel Xeon whose weight-streaming decode reads 7 GB/s (the shipped machine: 27 GB/s at the
same efficiency) and whose 512-matmul runs at 73 GFLOP/s (shipped: 111), a SmolLM2 plan
predicted generation 3.5x too fast and the step 2.3x too fast (bench/plan_accuracy.py).

How: the first plan on a machine without its own calibration (``arena plan --calibrate``) times
three things with one torch thread, as the calibration does, in about a second: a 512 matmul,
a 128 MB copy, and a decode-shaped read (one row through a stack of SmolLM2-sized linears,
`microbench.measure_decode_read`). Each figure is divided by the share of a core its thread got
while it was measured (its CPU time over its wall time) to estimate the idle machine: on a busy
machine, a probe priced with the load average instead stored matmul rates of 92 and 268 GFLOP/s
for the same CPU a minute apart, because the load average lags the work it counts. They are stored
under the calibration cache, keyed by the CPU's model name, core count and torch version: the
next plan reads the file and probes nothing. Plans then keep the shipped efficiencies on these
rates, with the decode read efficiency ``read / copy`` measured here.
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from pathlib import Path
from typing import Any

from arena_core.planner.coefficients import Coefficients
from arena_core.planner.hardware import HardwareProfile

FILE = "cpu-machine-rates.json"
PROBE_BYTES = (96 * 2**20 // (576 * 1536 * 4)) * 576 * 1536 * 4  # measure_decode_read's stack


def fingerprint() -> dict[str, Any]:
    """What must match for stored rates to describe this machine."""
    import torch

    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 1,
        "torch": torch.__version__,
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def rates_path() -> Path:
    from arena_core.store.home import arena_home

    return arena_home() / "calibration" / FILE


def probe() -> dict[str, float]:
    """Idle-machine estimates of the matmul, copy and decode-read rates (about a second)."""
    import torch

    from arena_core.planner.live import load_average
    from arena_core.planner.microbench import (
        measure_bandwidth,
        measure_decode_passes,
        measure_matmul,
    )

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        load = load_average()
        # the best of three: a neighbour's burst only ever slows a matmul down
        matmul, mm_share = _on_cpu(
            lambda: max(measure_matmul("cpu", sizes=(512,))["peak_tflops"] for _ in range(3))
        )
        copy, copy_share = _on_cpu(lambda: measure_bandwidth("cpu"))
        # seconds per pass over the stack at 1, 8 and 64 rows: the read, then the math it adds
        seconds, read_share = _on_cpu(lambda: measure_decode_passes(96, (1, 8, 64)))
    finally:
        torch.set_num_threads(threads)
    rates = {
        "matmul_tflops": matmul / mm_share,
        "mem_bandwidth_gbs": copy / copy_share,
        **_decode_rates(seconds, read_share),
        "load_average": load,
        "share": round(min(mm_share, copy_share, read_share), 3),
    }
    return rates


def _on_cpu(measure: Any) -> tuple[Any, float]:
    """(what `measure` returns, the share of a core its thread got meanwhile): its CPU time
    over its wall time. Rates measured on a busy machine, divided by that share, estimate the
    idle machine's: the time other work took the core is not the probe's."""
    cpu0, wall0 = time.thread_time(), time.perf_counter()
    out = measure()
    share = (time.thread_time() - cpu0) / max(1e-9, time.perf_counter() - wall0)
    return out, min(1.0, max(0.02, share))


def _decode_rates(seconds: dict[int, float], share: float) -> dict[str, float]:
    flops_tflops, half = decode_math(seconds)
    return {
        "decode_read_gbs": PROBE_BYTES / 1e9 / seconds[1] / share,
        "decode_flops_tflops": flops_tflops / share,
        "decode_half_batch": half,
    }


def decode_math(seconds: dict[int, float]) -> tuple[float, float]:
    """(rate in TFLOP/s, half batch) of the decode's matmuls beside the read, from the seconds
    one pass over the probe's stack took at 1, 8 and 64 rows.

    On a CPU the read and the math add (cost.py), and a small batch runs the math far below the
    matmul peak: ``seconds(B) - seconds(1) = 2 * P * (B + half) / rate`` with ``P`` the stack's
    parameters, solved from B = 8 and 64. Noise that breaks the form falls back to half = 0.
    """
    params = PROBE_BYTES / 4
    # a bf16 pass is flat up to a dozen rows: the math can hide in the read's noise
    c8 = max(0.0, seconds[8] - seconds[1])
    c64 = max(0.05 * seconds[64], seconds[64] - seconds[1])
    half = (64 * c8 - 8 * c64) / (c64 - c8) if c64 > c8 > 0 else -1.0
    if not 0 <= half <= 1024:
        return 2 * params * 64 / max(c64, 1e-9) / 1e12, 0.0
    return 2 * params * (8 + half) / c8 / 1e12, half


def machine_rates(measure: Any = None) -> tuple[dict[str, float], bool]:
    """(rates, probed_now): the stored rates of this machine, probing and storing them first
    when there are none (or they describe another CPU, core count or torch)."""
    path, key = rates_path(), fingerprint()
    try:
        stored = json.loads(path.read_text())
        if stored.get("fingerprint") == key:
            return {k: float(v) for k, v in stored["rates"].items()}, False
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # none yet, corrupt or another machine's: probe again
    rates = (measure or probe)()
    _write_atomic(path, {"fingerprint": key, "rates": rates})
    return rates, True


def _write_atomic(path: Path, payload: dict[str, Any]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".rates.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w") as fh:
            json.dump(payload, fh, indent=1)
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only cache only costs the next plan another probe


def on_this_machine(
    hw: HardwareProfile, coef: Coefficients, rates: dict[str, float]
) -> tuple[HardwareProfile, Coefficients]:
    """The shipped calibration's efficiencies on this machine's peak and bandwidths."""
    copy = max(rates["mem_bandwidth_gbs"], 1e-3)
    hw = hw.model_copy(
        update={
            "bf16_tflops": rates["matmul_tflops"],
            "mem_bandwidth_gbs": copy,
            "intra_node_gbs": copy,
        }
    )
    update: dict[str, float] = {"decode_bw_efficiency": min(1.0, rates["decode_read_gbs"] / copy)}
    if "decode_flops_tflops" in rates:
        update["decode_flops_efficiency"] = rates["decode_flops_tflops"] / rates["matmul_tflops"]
        update["decode_half_batch"] = rates["decode_half_batch"]
    return hw, coef.model_copy(update=update)

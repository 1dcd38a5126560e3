"""The CPU as it is now: a plan made on a busy machine predicts what a run will take on it, not
what it would take on the idle machine the calibration saw.

Why: this CPU is shared. With other work running, a run's torch thread gets a fraction of a core
and every step takes that much longer: measured here, a load average of 10-19 on 2 cores made
SmolLM2 steps 5-10x slower than on the idle machine. No stored calibration can know that.

How: Linux shares the cores fairly among runnable threads, so a run of ``T`` torch threads on ``C``
cores beside a load average of ``L`` gets about ``min(1, C / (L + T))`` of its idle speed. The
efficiencies (fractions of the peak) stay, the peak and the bandwidth shrink by that share, and
the fixed overheads (seconds of Python per layer and per step) stretch by it. The 1-minute load
average is used, not a quick benchmark: with a 0.2 s matmul probe at plan time, which catches
the load of one instant, bench/plan_accuracy.py's SmolLM2 steps came out at 0.5-1.5x the
prediction; with the fair share from the load average, the next runs of the same bench came
out at 0.85-1.2x (tiny and SmolLM2, load 4-11).

``ARENA_PLAN_PROBE=0`` turns this off (plans then use the calibration's rates as they are);
it only applies to the local ``cpu`` profile.
"""

from __future__ import annotations

import os
from typing import Any

from arena_core.planner.cost import Coefficients
from arena_core.planner.hardware import HardwareProfile

PROBE_ENV = "ARENA_PLAN_PROBE"
OVERHEADS = (
    "decode_step_overhead_s",
    "decode_layer_overhead_s",
    "learn_layer_overhead_s",
    "learn_microbatch_overhead_s",
)


def probe_enabled() -> bool:
    """On unless ``ARENA_PLAN_PROBE`` is 0/false/off."""
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def fair_share(threads: int, cores: int, load: float | None = None) -> float:
    """Fraction of its idle speed a run of ``threads`` torch threads gets beside ``load``
    (the 1-minute load average, read now when None) on ``cores`` cores."""
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    return min(1.0, cores / max(1e-9, load + threads))


def rates_now(hw: HardwareProfile, threads: int, load: float | None = None) -> dict[str, float]:
    """``hw``'s calibrated rates scaled by the fair share of the cores a run gets now."""
    if load is None:
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    share = fair_share(threads, hw.cores or 1, load)
    return {
        "matmul_tflops": hw.bf16_tflops * share,
        "mem_bandwidth_gbs": hw.mem_bandwidth_gbs * share,
        "share": share,
        "threads": float(threads),
        "load_average": load,
    }


def at_current_rates(
    hw: HardwareProfile, coef: Coefficients, now: dict[str, float]
) -> tuple[HardwareProfile, Coefficients]:
    """``hw`` with today's measured peak and bandwidth; ``coef`` with its fixed overheads
    stretched by how much slower the matmul runs now than its calibrated peak."""
    speed = now["matmul_tflops"] / hw.bf16_tflops
    hw_now = hw.model_copy(
        update={
            "bf16_tflops": now["matmul_tflops"],
            "mem_bandwidth_gbs": now["mem_bandwidth_gbs"],
            "intra_node_gbs": now["mem_bandwidth_gbs"],
        }
    )
    update: dict[str, Any] = {k: getattr(coef, k) / max(speed, 1e-3) for k in OVERHEADS}
    return hw_now, coef.model_copy(update=update)

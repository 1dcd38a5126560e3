"""The CPU as it is now: a plan made on a busy machine predicts what a run will take on it, not
what it would take on the idle machine the calibration saw.

Why: this CPU is shared. With other work running, a run's torch threads get a fraction of a core
each and every step takes that much longer: measured here, other work on 2 cores made SmolLM2
steps 2-10x slower than on the idle machine. No stored calibration can know that.

How: the speed is measured, not inferred. As the plan is made, `measure_speed` times two
SmolLM2-sized matrix products, a decode step's (16 rows) and a learning micro-batch's (1024 rows),
with one torch thread, whose rate per CPU second (``time.thread_time``) is the idle core's, and
with the run's own torch thread count by the wall clock: what the run will get now, whatever
competes (other processes, a cgroup CPU quota, an affinity narrower than the machine) and however
its threads fare (more threads run faster on idle cores; at load average 10 on this 2-core
machine a decode-sized product on 2 threads ran 7-19x slower than on one, each call waiting for
a preempted thread). The ratios scale the calibration's one-thread rates: the peak by the learning shape's,
the bandwidth and the decode's math by the decode shape's; the fixed overheads (seconds of Python
per layer and per step, one thread) stretch by the share of a core the one-thread passes got.
The 1-minute load average is not used: it lags, so right after other work stopped a plan priced
at it predicted 4.56 s per step against 1.98 s measured (issue 44), and right after work started
it prices the idle machine. The probe alternates the two sides four times over a second, so a
neighbour's burst of a tenth of a second weighs on both alike (a half-second probe of two
alternations priced 2 threads at 0.24-0.99 of one idle thread in ten consecutive plans on this
machine at load average 2.2; the one-second probe 0.41-0.50 in six at load average 5). Still it
sees an instant: each plan notes the speeds it was priced at and the load average beside them,
and a run re-prices its step at the speed its first step really ran at (`refill.observe_speed`,
`sft_price.sft_reprice`).

``ARENA_PLAN_CPU_SHARE=F`` fixes every speed at F of one idle thread's (0 < F <= 1) instead of
measuring it, and ``ARENA_PLAN_PROBE=0`` turns live pricing off (plans then use the
calibration's rates as they are); both only apply to the local ``cpu`` profile.
"""

from __future__ import annotations

import os
import time
from typing import Any

from arena_core.errors import ConfigError
from arena_core.machine import usable_cpus
from arena_core.planner.coefficients import Coefficients
from arena_core.planner.hardware import HardwareProfile

PROBE_ENV = "ARENA_PLAN_PROBE"
SHARE_ENV = "ARENA_PLAN_CPU_SHARE"
PROBE_SECONDS = 1.0
PROBE_ROUNDS = 4  # alternations of the one-thread and the run's-threads passes
OVERHEADS = (
    "decode_step_overhead_s",
    "decode_layer_overhead_s",
    "learn_layer_overhead_s",
    "learn_microbatch_overhead_s",
)


def probe_enabled() -> bool:
    """On unless ``ARENA_PLAN_PROBE`` is 0/false/off."""
    return os.environ.get(PROBE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def load_average() -> float:
    """The 1-minute load average (0 where the OS has none): reported beside the share."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return 0.0


def pinned_share() -> float | None:
    """``ARENA_PLAN_CPU_SHARE``: the run's speed as a fraction of one idle thread's, or None."""
    raw = os.environ.get(SHARE_ENV, "").strip()
    if not raw:
        return None
    try:
        share = float(raw)
    except ValueError:
        share = -1.0
    if not 0 < share <= 1:
        raise ConfigError(
            f"{SHARE_ENV}={raw!r}: expected the run's speed as a fraction of one idle thread's, "
            "in (0, 1] (e.g. 0.5 for one thread beside as many busy processes as cores); unset "
            "it to measure the speed as the plan is made"
        )
    return share


# the probe's two shapes, SmolLM2-sized (576 x 1536 weights): a decode step's few rows, and a
# learning micro-batch's many
DECODE_ROWS, LEARN_ROWS = 16, 1024


def measure_speed(threads: int, seconds: float = PROBE_SECONDS) -> dict[str, float]:
    """How fast ``threads`` torch threads run now, against one thread of the idle machine.

    Two shapes, a decode step's (16 rows) and a learning micro-batch's (1024 rows), each timed
    with one torch thread, whose rate per CPU second (``time.thread_time``) is the idle core's,
    then with ``threads`` threads by the wall clock: what the run will get. Their ratio is the
    speed factor of each shape (``decode``, ``learn``); ``share`` is the fraction of a core the
    one-thread runs got (the run's Python thread: its per-layer overheads stretch by it). The
    passes alternate (`PROBE_ROUNDS` times), ``seconds`` in all, so a neighbour's burst weighs
    on both sides alike.

    Why measured, not derived from a share: more threads are faster on idle cores and can be
    far slower on busy ones, where a decode-sized product on 2 threads ran 7-19x slower than on
    1 (this 2-core machine at load average 10: each call waits for the preempted thread)."""
    import torch

    before = torch.get_num_threads()
    w = torch.full((1536, 576), 0.01)
    shapes = {
        "decode": torch.full((DECODE_ROWS, 576), 0.5),
        "learn": torch.full((LEARN_ROWS, 576), 0.5),
    }
    idle = {k: [0.0, 0.0] for k in shapes}  # flops, CPU seconds
    now = {k: [0.0, 0.0] for k in shapes}  # flops, wall seconds
    wall_1 = [0.0, 0.0]  # CPU seconds, wall seconds of the one-thread passes
    slot = seconds / (PROBE_ROUNDS * 2 * len(shapes))
    try:
        for _ in range(PROBE_ROUNDS):
            for name, x in shapes.items():
                flops = 2.0 * x.shape[0] * 576 * 1536
                for n_threads, into in ((1, idle), (max(1, threads), now)):
                    torch.set_num_threads(n_threads)
                    torch.mm(x, w.T)  # warm the pool at this size
                    calls, cpu0, wall0 = 0, time.thread_time(), time.perf_counter()
                    while time.perf_counter() - wall0 < slot:
                        torch.mm(x, w.T)
                        calls += 1
                    cpu, wall = time.thread_time() - cpu0, time.perf_counter() - wall0
                    into[name][0] += flops * calls
                    into[name][1] += cpu if into is idle else wall
                    if into is idle:
                        wall_1[0], wall_1[1] = wall_1[0] + cpu, wall_1[1] + wall
    finally:
        torch.set_num_threads(before)
    out = {
        name: (now[name][0] / max(1e-9, now[name][1])) / (idle[name][0] / max(1e-9, idle[name][1]))
        for name in shapes
    }
    out["share"] = min(1.0, wall_1[0] / max(1e-9, wall_1[1]))
    return out


def share_now(threads: int) -> dict[str, Any]:
    """What ``threads`` torch threads of a run get now: the speed factors against one idle
    thread (``learn``, ``decode``: `measure_speed`), ``share`` (of a core, the Python thread's),
    how they were found (``measured`` or ``pinned``), the usable CPUs and the load average."""
    pinned = pinned_share()
    if pinned is not None:
        speed = {"learn": pinned, "decode": pinned, "share": pinned}
    else:
        speed = measure_speed(threads)
    return {
        **speed,
        "how": "pinned" if pinned is not None else "measured",
        "threads": float(threads),
        "usable_cpus": usable_cpus(),
        "load_average": load_average(),
    }


def rates_now(hw: HardwareProfile, now: dict[str, Any]) -> dict[str, float]:
    """``hw``'s calibrated (one idle thread's) rates at the speed the run gets now: the peak
    by the learning shape's factor, the bandwidth by the decode shape's."""
    return {
        "matmul_tflops": hw.bf16_tflops * float(now["learn"]),
        "mem_bandwidth_gbs": hw.mem_bandwidth_gbs * float(now["decode"]),
        "decode_flops_scale": float(now["decode"]) / max(1e-9, float(now["learn"])),
        "share": float(now["share"]),
    }


def at_current_rates(
    hw: HardwareProfile, coef: Coefficients, now: dict[str, float]
) -> tuple[HardwareProfile, Coefficients]:
    """``hw`` with the peak and bandwidth the run gets now (``rates_now``); ``coef`` with the
    decode's math at the decode shape's speed, and its fixed overheads (Python, one thread)
    stretched by the share of a core that thread gets (by the matmul's slowdown when no share
    was measured)."""
    speed = now["matmul_tflops"] / hw.bf16_tflops
    hw_now = hw.model_copy(
        update={
            "bf16_tflops": now["matmul_tflops"],
            "mem_bandwidth_gbs": now["mem_bandwidth_gbs"],
            "intra_node_gbs": now["mem_bandwidth_gbs"],
        }
    )
    stretch = float(now.get("share", speed))
    update: dict[str, Any] = {k: getattr(coef, k) / max(stretch, 1e-3) for k in OVERHEADS}
    if "decode_flops_scale" in now:
        update["decode_flops_efficiency"] = coef.decode_flops_efficiency * now["decode_flops_scale"]
    return hw_now, coef.model_copy(update=update)

"""How a run is checked while it runs: the plan's predicted step time against the measured steps,
so a plan that is off on this machine says so early, with the CPU share it was priced at.

The prediction checked is the plan's step re-priced after the first steps (`planner.refill`,
`repriced` in the plan) when there is one: at the flat-group rate the run has observed (refill
rounds are part of what a step costs, and only the run can see how many it needs) and at the
speed its latest re-price saw (the CPU the run really gets)."""

from __future__ import annotations

import statistics
from typing import Any


def plan_check(plan: dict[str, Any], step_seconds: list[float]) -> str:
    """`plan check: ...`: the first steps' measured mean against the plan's prediction."""
    after = int((plan.get("repriced") or {}).get("after_steps") or 1)
    repriced = (plan.get("repriced") or {}).get("step_seconds") or {}
    predicted = repriced.get("total") or (
        ((plan.get("predicted") or {}).get("step_seconds") or {}).get("total")
    )
    measured = statistics.fmean(step_seconds)
    steps = f"steps 2-{len(step_seconds) + 1}"
    if not predicted:
        return f"plan check: {measured:.2f} s/step measured ({steps}); the plan predicted none"
    ratio = predicted / measured
    refills = f" (re-priced after step {after}: refill rounds, observed speed)" if repriced else ""
    line = (
        f"plan check: {measured:.2f} s/step measured ({steps}) vs {predicted:.2f} s predicted"
        f"{refills} (x{ratio:.2f})"
    )
    if abs(ratio - 1) > 0.3 and (plan.get("repriced") or {}).get("observed_speed"):
        faster = "faster" if ratio > 1 else "slower"
        line += (
            f": off by more than 30%: the steps ran {faster} than step {after}, whose speed "
            "priced them (other work on this machine started or stopped)"
        )
    elif abs(ratio - 1) > 0.3:
        line += ": off by more than 30% on this machine"
        load, cores = _load()
        speed = plan.get("priced_at_speed")
        if load > cores:
            at = (
                f"{speed['learn']:.0%} of an idle thread's learning speed"
                if speed
                else "an idle machine"
            )
            line += (
                f" (load average {load:.1f} on {cores} cores: other work is slowing this run; the "
                f"plan was priced for {at})"
            )
        else:
            line += (
                "; `arena plan --calibrate runtime.threads=N` fits the cost model to it (N: the "
                "run's runtime.threads)"
            )
    return line


def _load() -> tuple[float, int]:
    """(1-minute load average, usable cores); (0, cores) where the OS has no load average."""
    import os

    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        cores = os.cpu_count() or 1
    try:
        return os.getloadavg()[0], cores
    except (AttributeError, OSError):  # pragma: no cover - Windows
        return 0.0, cores

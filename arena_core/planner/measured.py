"""Measured step seconds beside the predicted ones, in the run's plan.json.

A run ends by adding `measured.step_seconds` (generate, learn, sync and total: means per step over
the run) next to the planner's `predicted.step_seconds` (and `repriced`: the step priced at the
flat-group rate and the speed of the whole run, `planner.refill`; `repriced_first` and
`repriced_warm`: what it printed after its first and its second step), so
`arena plan --calibrate RUN` can fit the cost model to what the machine really did, and the
dashboard can show both.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from arena_core.store.atomic import atomic_write_json, read_json

PHASES = {
    "generate": "time/generate_s",
    "learn": "time/learn_s",
    "sync": "time/weight_sync_pause_s",
}


def measured_step_seconds(
    totals: dict[str, float], steps: int, step_times: list[float]
) -> dict[str, float]:
    """Mean seconds per step of each phase (totals summed over `steps`) and of the whole step
    (this process's steps after the first, which warms up, when there are several)."""
    n = max(1, int(steps))
    out = {name: float(totals.get(key, 0.0)) / n for name, key in PHASES.items()}
    timed = step_times[1:] if len(step_times) > 1 else step_times
    out["total"] = statistics.fmean(timed) if timed else 0.0
    out["steps"] = n
    return out


def record_measured(
    run_dir: Path, totals: dict[str, float], steps: int, step_times: list[float]
) -> None:
    """Add the measured seconds to `run_dir/plan.json` (nothing when the run has no plan)."""
    path = Path(run_dir) / "plan.json"
    if not path.is_file() or steps <= 0:
        return
    plan: dict[str, Any] = read_json(path)
    plan["measured"] = {"step_seconds": measured_step_seconds(totals, steps, step_times)}
    from arena_core.planner.refill import reprice

    final = reprice(plan, totals, steps)
    if final is not None:  # the step at the flat-group rate of the whole run
        plan["repriced"] = final
    for kept, after in (("first", 1), ("warm", 2)):  # what the run printed after steps 1, 2
        if f"refill/{kept}_total_s" not in totals:
            continue
        plan[f"repriced_{kept}"] = {
            "flat_rate": totals[f"refill/{kept}_flat_rate"],
            "after_steps": after,
            "observed_speed": {
                phase: round(totals.get(f"refill/{kept}_speed_{phase}", 1.0), 3)
                for phase in ("generate", "learn")
            },
            "step_seconds": {
                phase: totals[f"refill/{kept}_{phase}_s"]
                for phase in ("generate", "learn", "total")
                if f"refill/{kept}_{phase}_s" in totals
            },
        }
    atomic_write_json(path, plan)

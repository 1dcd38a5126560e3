"""`arena plan --calibrate RUN`: fit the cost model to a finished run's measured step times.

A run's plan.json holds the planner's `predicted.step_seconds` and, once the run ends, the
`measured.step_seconds` beside them (`arena_core.planner.measured`). Each side of the cost model is
linear in its coefficients' inverse efficiencies and overheads, so scaling every learn coefficient
by `measured.learn / predicted.learn` (efficiencies divided, overheads multiplied) makes the model
reproduce the run's learn time on its own workload; the same for generation, and the measured sync
replaces the fixed sync pause. The result is stored as the hardware profile's calibration, like the
micro-benchmark calibration, and every later plan on that profile uses it.

Efficiencies are capped at 1 (a model faster than the hardware's peak means the profile's peak is
wrong: fix the profile instead); the fit says so when a cap bit.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from arena_core.errors import ArenaError
from arena_core.planner.coefficients import (
    Calibration,
    Coefficients,
    coefficients_for,
    save_calibration,
)

LEARN_EFFICIENCIES = ("learn_efficiency", "optimizer_bw_efficiency")
LEARN_OVERHEADS = (
    "learn_layer_overhead_s",
    "learn_microbatch_overhead_s",
    "reshard_layer_overhead_s",
    "expert_chunk_overhead_s",
)
GENERATE_EFFICIENCIES = ("prefill_efficiency", "decode_bw_efficiency", "decode_flops_efficiency")
GENERATE_OVERHEADS = ("decode_step_overhead_s", "decode_layer_overhead_s")


def read_run_times(run_dir: Path) -> tuple[str, dict[str, float], dict[str, float]]:
    """(hardware profile, predicted, measured) step seconds from `run_dir/plan.json`."""
    from arena_core.store.atomic import read_json

    path = Path(run_dir) / "plan.json"
    if not path.is_file():
        raise ArenaError(
            f"{run_dir} has no plan.json: calibrate from a run that arena-run started (it saves "
            "the plan), or run `arena plan --calibrate` without a run directory"
        )
    plan: dict[str, Any] = read_json(path)
    predicted = (plan.get("predicted") or {}).get("step_seconds") or {}
    measured = (plan.get("measured") or {}).get("step_seconds") or {}
    if not measured:
        raise ArenaError(
            f"{path} has no measured step times: the run has not finished (a run adds them "
            "when it ends), or it predates Arena recording them"
        )
    hardware = str((plan.get("hardware") or {}).get("name") or "")
    if not hardware:
        raise ArenaError(f"{path} names no hardware profile (hardware.name)")
    return hardware, predicted, measured


def _ratio(measured: dict[str, float], predicted: dict[str, float], key: str) -> float | None:
    m, p = float(measured.get(key) or 0.0), float(predicted.get(key) or 0.0)
    return m / p if m > 0 and p > 0 else None


def fit_to_run(
    base: Coefficients, predicted: dict[str, float], measured: dict[str, float]
) -> tuple[Coefficients, dict[str, float], list[str]]:
    """Coefficients scaled so `base`'s predictions match `measured`; (coefficients, ratios, notes)."""
    update: dict[str, float] = {}
    ratios: dict[str, float] = {}
    notes: list[str] = []
    for side, effs, overheads in (
        ("learn", LEARN_EFFICIENCIES, LEARN_OVERHEADS),
        ("generate", GENERATE_EFFICIENCIES, GENERATE_OVERHEADS),
    ):
        r = _ratio(measured, predicted, side)
        if r is None:
            notes.append(f"{side}: no measured and predicted time to compare; kept")
            continue
        ratios[f"{side}_ratio"] = r
        for name in effs:
            value = getattr(base, name) / r
            if value > 1.0:
                notes.append(f"{name} capped at 1 (fit {value:.2f}): the profile's peak is low")
            update[name] = min(1.0, value)
        for name in overheads:
            update[name] = getattr(base, name) * r
    sync_m, sync_p = measured.get("sync"), predicted.get("sync")
    if sync_m is not None and sync_p is not None:
        update["sync_fixed_s"] = max(0.0, base.sync_fixed_s + float(sync_m) - float(sync_p))
        ratios["sync_measured_s"] = float(sync_m)
    return base.model_copy(update=update), ratios, notes


def calibrate_from_run(run_dir: Path) -> tuple[Calibration, Path]:
    """Fit the run's hardware profile to the run's measured times and store the calibration."""
    from arena_core.planner.hardware import get_profile

    name, predicted, measured = read_run_times(run_dir)
    base = coefficients_for(get_profile(name))
    coef, ratios, notes = fit_to_run(base, predicted, measured)
    cal = Calibration(
        profile=name,
        created=datetime.now(UTC).isoformat(timespec="seconds"),
        coefficients=coef.model_copy(update={"source": "defaults"}),
        measured=ratios,
        raw={
            "run_dir": str(Path(run_dir).resolve()),
            "predicted_step_seconds": predicted,
            "measured_step_seconds": measured,
            "base": base.source,
            "notes": notes,
        },
    )
    return cal, save_calibration(cal)

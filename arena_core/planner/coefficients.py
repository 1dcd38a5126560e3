"""The cost model's coefficients and where they come from: this machine's calibration, the shipped one, or the defaults.

A calibration (`arena plan --calibrate`, `calibrate.py`) is kept per hardware profile in
``$ARENA_CACHE_DIR/calibration/<profile>.json`` (default ``~/.cache/arena``), written atomically,
and read at plan time; the CPU profile also ships one (``calibrations/cpu.json``). Two readers
need them: the cost model (`coefficients_for`: efficiencies and overheads) and the CPU hardware
profile (`effective_calibration`: the matmul and bandwidth rates measured beside them). This
module imports no other planner module, so both can read it without a loop.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from arena_core.store.atomic import atomic_write_text
from arena_core.store.home import arena_home, writable_home

if TYPE_CHECKING:
    from arena_core.planner.hardware import HardwareProfile


class Coefficients(BaseModel):
    """Efficiencies and overheads of one hardware profile (defaults, or fitted by calibration)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    learn_efficiency: float = 0.40  # MFU at large micro-batches (FSDP bf16, H100: ~40%)
    learn_half_tokens: float = 1024.0
    learn_layer_overhead_s: float = 2e-5  # per layer per micro-batch (launches not hidden)
    reshard_layer_overhead_s: float = 2e-5  # the extra all-gather's sync per layer per micro-batch
    expert_chunk_overhead_s: float = 3e-5  # per expert chunk per MoE layer per pass
    prefill_efficiency: float = 0.50
    decode_bw_efficiency: float = 0.75
    decode_flops_efficiency: float = 0.50
    decode_half_batch: float = 16.0
    decode_step_overhead_s: float = 3e-3  # scheduler + sampling per step (vLLM with CUDA graphs)
    decode_layer_overhead_s: float = 0.0
    collective_efficiency: float = 0.70
    optimizer_bw_efficiency: float = 0.60
    sync_fixed_s: float = 0.5
    lora_sync_fixed_s: float = 0.2
    activation_factor: float = 1.0
    learn_microbatch_overhead_s: float = 0.0  # per forward+backward call
    prefix_sharing: bool = True  # engines prefill a prompt once per group (vLLM prefix cache)
    source: str = "defaults"  # "defaults" or the calibration file they were read from

    @classmethod
    def defaults_for(cls, hw: HardwareProfile) -> Coefficients:
        if hw.kind == "cpu":
            # Uncalibrated CPU guesses (HF generate and eager torch: Python per layer dominates
            # small models). `arena plan --calibrate` replaces them with fitted values.
            return cls(
                learn_efficiency=0.5,
                learn_half_tokens=256,
                learn_layer_overhead_s=3e-4,
                reshard_layer_overhead_s=0,
                prefill_efficiency=0.4,
                decode_bw_efficiency=0.5,
                decode_flops_efficiency=0.3,
                decode_half_batch=4,
                decode_step_overhead_s=2e-3,
                decode_layer_overhead_s=2.5e-4,
                sync_fixed_s=0.0,
                lora_sync_fixed_s=0.0,
                prefix_sharing=False,
            )
        return cls()


class Calibration(BaseModel):
    """What one calibration run measured and the coefficients fitted from it."""

    profile: str
    created: str
    coefficients: Coefficients
    measured: dict[str, float]
    raw: dict[str, Any] = {}
    environment: dict[str, str] = {}


SHIPPED_DIR = Path(__file__).resolve().parent / "calibrations"
SHIPPED = "shipped"  # Coefficients.source of a shipped calibration


def shipped_calibration(profile: str) -> Calibration | None:
    """The calibration that ships with Arena for `profile` (only ``cpu``), or None."""
    try:
        return Calibration.model_validate_json((SHIPPED_DIR / f"{profile}.json").read_text())
    except (OSError, ValidationError, ValueError):
        return None


def effective_calibration(profile: str) -> Calibration | None:
    """This machine's stored calibration, else the shipped one, else None."""
    return load_calibration(profile) or shipped_calibration(profile)


def calibration_path(profile: str) -> Path:
    return arena_home() / "calibration" / f"{profile}.json"


def load_calibration(profile: str) -> Calibration | None:
    """The stored calibration of a profile, or None (a corrupt file is ignored, not fatal)."""
    path = calibration_path(profile)
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None


def coefficients_for(hw: HardwareProfile) -> Coefficients:
    """Coefficients fitted on this machine when it was calibrated, else the shipped calibration
    (CPU), else the documented defaults (``source`` says which: a path, "shipped", "defaults")."""
    cal = load_calibration(hw.name)
    if cal is not None:
        return cal.coefficients.model_copy(update={"source": str(calibration_path(hw.name))})
    cal = shipped_calibration(hw.name)
    if cal is not None:
        return cal.coefficients.model_copy(update={"source": SHIPPED})
    return Coefficients.defaults_for(hw)


def save_calibration(cal: Calibration) -> Path:
    """Write atomically: a reader sees the old file or the new one, never half of one."""
    writable_home(f"the calibration of {cal.profile}")
    path = calibration_path(cal.profile)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, cal.model_dump_json(indent=2))
    return path

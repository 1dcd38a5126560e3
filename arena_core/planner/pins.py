"""User-pinned plan fields (the ``plan:`` config section): validation and matching.

A pin restricts the search to plans with that value. Friendly values are accepted: ``offload:
true`` means any offload, ``colocate: true`` any colocation, ``false`` none of either.
"""

from __future__ import annotations

from typing import Any

from arena_core.errors import ConfigError
from arena_core.planner.plan import OFFLOAD_LEVELS, Plan

PINNABLE: tuple[str, ...] = (
    "trainer_devices",
    "engines",
    "engine_tp",
    "micro_batch_tokens",
    "activation_checkpointing",
    "offload",
    "reshard_after_forward",
    "fsdp",
    "tp",
    "cp",
    "ep",
    "expert_chunk",
    "colocate",
    "fused_logprob",
    "engine_memory_fraction",
)
LAYOUT_PINS = frozenset({"trainer_devices", "engines", "engine_tp", "colocate"})
ANY_OFFLOAD, ANY_COLOCATION = "any-offload", "any-colocation"
_INT_PINS = {
    "trainer_devices",
    "engines",
    "engine_tp",
    "micro_batch_tokens",
    "fsdp",
    "tp",
    "cp",
    "ep",
    "expert_chunk",
}
_ZERO_MEANS_NONE = {"engines", "expert_chunk"}  # no separate engine; no expert chunking
_BOOL_PINS = {"activation_checkpointing", "reshard_after_forward", "fused_logprob"}


def normalize_pins(pinned: dict[str, Any]) -> dict[str, Any]:
    """Validate pinned fields (every problem at once) and map friendly values to plan values."""
    out: dict[str, Any] = {}
    problems = []
    for key, value in pinned.items():
        if value is None:
            continue
        if key not in PINNABLE:
            problems.append(f"plan.{key}: not a plan field; pinnable: {', '.join(PINNABLE)}")
        elif key == "offload":
            mapped = (
                {True: ANY_OFFLOAD, False: "none"}.get(value, value)
                if isinstance(value, bool)
                else value
            )
            if mapped not in (*OFFLOAD_LEVELS, ANY_OFFLOAD):
                problems.append(
                    f"plan.offload: {value!r} is not one of true, false, "
                    f"{', '.join(OFFLOAD_LEVELS)}"
                )
            else:
                out[key] = mapped
        elif key == "colocate":
            mapped = (
                {True: ANY_COLOCATION, False: "none"}.get(value, value)
                if isinstance(value, bool)
                else value
            )
            if mapped not in ("none", "shared", "sleep", ANY_COLOCATION):
                problems.append(
                    f"plan.colocate: {value!r} is not one of true, false, none, shared, sleep"
                )
            else:
                out[key] = mapped
        elif key in _INT_PINS:
            least = 0 if key in _ZERO_MEANS_NONE else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                kind = "an integer >= 0 (0: none)" if least == 0 else "a whole number >= 1"
                problems.append(f"plan.{key}: expected {kind}, got {value!r}")
            else:
                out[key] = value
        elif key in _BOOL_PINS:
            if not isinstance(value, bool):
                problems.append(f"plan.{key}: expected true or false, got {value!r}")
            else:
                out[key] = value
        else:  # engine_memory_fraction
            if not isinstance(value, int | float) or not 0 < float(value) <= 1:
                problems.append(f"plan.{key}: expected a fraction in (0, 1], got {value!r}")
            else:
                out[key] = float(value)
    if problems:
        raise ConfigError(problems, header="Invalid plan pins")
    return out


def matches(plan: Plan, pins: dict[str, Any]) -> bool:
    """Whether ``plan`` has every pinned value (``engine_memory_fraction`` is an output override)."""
    for key, want in pins.items():
        if key == "engine_memory_fraction":
            continue
        have = getattr(plan, key)
        if want == ANY_OFFLOAD and key == "offload":
            if have == "none":
                return False
        elif want == ANY_COLOCATION and key == "colocate":
            if have == "none":
                return False
        elif have != want:
            return False
    return True


def as_written(value: Any) -> str:
    """A pin value as the user would write it."""
    if isinstance(value, bool):
        return str(value).lower()
    return {ANY_OFFLOAD: "true", ANY_COLOCATION: "true"}.get(str(value), str(value))

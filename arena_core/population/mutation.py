"""Mutations of a member's hyperparameters: none, or one RL hyperparameter scaled.

AgileRL's LLM mutations: with relative weights `no_mut` and `rl_hp_mut`, a member either keeps its
hyperparameters or has one field of `rl_hp_selection` (drawn uniformly) multiplied by
`grow_factor` or `shrink_factor` (a fair coin), clipped to [min, max]. Integer fields round up
when growing and down when shrinking (AgileRL's `int()` truncates, so 4 x 1.2 stays 4 and a small
integer can never grow), and always move by at least 1 when the range allows it. A value that
the range clipped says so in its description ("lr x10 (1e-04 -> 0.001, clamped to max)"), so
the lineage and the log never show a factor that was not applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("no_mut", "rl_hp_mut")


@dataclass(frozen=True)
class Mutation:
    kind: str  # "no_mut" | "rl_hp_mut"
    hyperparameters: dict[str, Any]  # after the mutation
    field: str | None = None
    factor: float | None = None
    old: Any = None
    clamped: str | None = None  # "min" or "max": the range clipped old x factor

    def describe(self) -> str:
        """Short text for lineage events: 'lr x1.2 (1e-06 -> 1.2e-06)', 'lr x10 (0.0005 ->
        0.001, clamped to max)' or 'no mutation'."""
        if self.field is None:
            return "no mutation"
        new = self.hyperparameters[self.field]
        note = f", clamped to {self.clamped}" if self.clamped else ""
        return f"{self.field} x{self.factor:g} ({self.old:g} -> {new:g}{note})"


def choose_kind(probabilities: dict[str, float], rng: np.random.Generator) -> str:
    weights = np.array([float(probabilities.get(k, 0.0)) for k in KINDS])
    return str(KINDS[int(rng.choice(len(KINDS), p=weights / weights.sum()))])


def scale_value(value: float | int, factor: float, lo: float, hi: float) -> float | int:
    """`value * factor` clipped to [lo, hi]; an int stays an int and moves by at least 1."""
    return scale(value, factor, lo, hi)[0]


def scale(
    value: float | int, factor: float, lo: float, hi: float
) -> tuple[float | int, str | None]:
    """`scale_value` and which bound clipped it: "min", "max" or None (the factor applied)."""
    if isinstance(value, int) and not isinstance(value, bool):
        ilo, ihi = math.ceil(lo), math.floor(hi)
        if factor > 1:
            raw = max(math.ceil(value * factor), value + 1)
        else:
            raw = min(math.floor(value * factor), value - 1)
        new: float | int = int(min(max(raw, ilo), ihi))
    else:
        raw = float(value) * factor
        new = float(min(max(raw, lo), hi))
    if new == raw:
        return new, None
    return new, "max" if raw > new else "min"


def mutate(
    hyperparameters: dict[str, Any],
    *,
    probabilities: dict[str, float],
    ranges: dict[str, dict[str, float]],
    rng: np.random.Generator,
) -> Mutation:
    """One mutation draw for one member (every draw from `rng`, so a seed fixes the outcome)."""
    kind = choose_kind(probabilities, rng)
    hp = dict(hyperparameters)
    if kind == "no_mut" or not ranges:
        return Mutation(kind=kind, hyperparameters=hp)
    names = list(ranges)
    field = names[int(rng.integers(len(names)))]
    spec = ranges[field]
    grow = rng.uniform(0.0, 1.0) > 0.5
    factor = float(spec.get("grow_factor", 1.2) if grow else spec.get("shrink_factor", 0.8))
    old = hp[field]
    hp[field], clamped = scale(old, factor, float(spec["min"]), float(spec["max"]))
    return Mutation(
        kind=kind, hyperparameters=hp, field=field, factor=factor, old=old, clamped=clamped
    )

"""Mutations of a member's hyperparameters: none, or one RL hyperparameter scaled.

AgileRL's LLM mutations: with relative weights `no_mut` and `rl_hp_mut`, a member either keeps its
hyperparameters or has one field of `rl_hp_selection` (drawn uniformly) multiplied by
`grow_factor` or `shrink_factor` (a fair coin), clipped to [min, max]. Integer fields round up
when growing and down when shrinking (AgileRL's `int()` truncates, so 4 x 1.2 stays 4 and a small
integer can never grow), and always move by at least 1 when the range allows it.
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

    def describe(self) -> str:
        """Short text for lineage events: 'lr x1.2 (1e-06 -> 1.2e-06)' or 'no mutation'."""
        if self.field is None:
            return "no mutation"
        new = self.hyperparameters[self.field]
        return f"{self.field} x{self.factor:g} ({self.old:g} -> {new:g})"


def choose_kind(probabilities: dict[str, float], rng: np.random.Generator) -> str:
    weights = np.array([float(probabilities.get(k, 0.0)) for k in KINDS])
    return str(KINDS[int(rng.choice(len(KINDS), p=weights / weights.sum()))])


def scale_value(value: float | int, factor: float, lo: float, hi: float) -> float | int:
    """`value * factor` clipped to [lo, hi]; an int stays an int and moves by at least 1."""
    if isinstance(value, int) and not isinstance(value, bool):
        ilo, ihi = math.ceil(lo), math.floor(hi)
        if factor > 1:
            new = max(math.ceil(value * factor), value + 1)
        else:
            new = min(math.floor(value * factor), value - 1)
        return int(min(max(new, ilo), ihi))
    return float(min(max(float(value) * factor, lo), hi))


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
    hp[field] = scale_value(old, factor, float(spec["min"]), float(spec["max"]))
    return Mutation(kind=kind, hyperparameters=hp, field=field, factor=factor, old=old)

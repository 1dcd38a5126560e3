"""Tournament selection with elitism, as AgileRL's `TournamentSelection` does it.

The elite is the member with the best last fitness. With elitism it keeps slot 0 unchanged; every
other slot is filled by a tournament: `tournament_size` members drawn at random (with
replacement), the best-ranked of them is the parent. One difference from AgileRL: a member whose
run failed (NaN, crash) is never drawn while a healthy one exists, so a failed member is always
replaced at the next selection (AgileRL would let it win a tournament against itself).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Selection:
    """Indices into the old population: the elite, and the parent of every new slot."""

    elite: int
    parents: list[int]  # len == population size; parents[0] == elite with elitism


def worst_fitness() -> float:
    """The fitness of a failed member: below any real score."""
    return -math.inf


def tournament_select(
    fitness: list[float],
    *,
    tournament_size: int,
    elitism: bool,
    rng: np.random.Generator,
    failed: list[bool] | None = None,
) -> Selection:
    """Pick the next generation's parents from the last `fitness` of each member (NaN counts as
    the worst). Draws come from `rng` only, so a seed fixes the sequence."""
    n = len(fitness)
    if n == 0:
        raise ValueError("an empty population has nothing to select")
    failed = list(failed or [False] * n)
    rank = _ranks(fitness, failed)
    elite = int(np.argsort(rank, kind="stable")[-1])
    healthy = [i for i in range(n) if not failed[i]] or list(range(n))
    parents = [elite] if elitism else []
    while len(parents) < n:
        draws = rng.choice(healthy, size=tournament_size, replace=True)
        parents.append(int(max(draws, key=lambda i: rank[i])))
    return Selection(elite=elite, parents=parents)


def _ranks(fitness: list[float], failed: list[bool]) -> np.ndarray:
    """0 for the worst ... n-1 for the best; NaN and failed members are the worst; ties rank the
    later member higher (AgileRL's argsort of argsort)."""
    values = np.array(
        [
            worst_fitness() if bad or math.isnan(f) else f
            for f, bad in zip(fitness, failed, strict=True)
        ]
    )
    return values.argsort(kind="stable").argsort(kind="stable")


def elite_index(fitness: list[float], failed: list[bool] | None = None) -> int:
    """The member `tournament_select` would keep as elite."""
    rank = _ranks(fitness, list(failed or [False] * len(fitness)))
    return int(np.argsort(rank, kind="stable")[-1])

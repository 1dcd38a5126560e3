"""Bounded staleness: when the batch for a learner step may start generating.

Version v is the policy after v learner updates, so learner step s trains on samples and turns
version s into s + 1. A batch sampled (in part) by version v and consumed by step s has
staleness s - v (0 is on-policy); `max_staleness` bounds it.

Each step's batch is consumed by that very step, and a row's oldest version is the one its
generation started with (its prompt's KV cache), so a batch's staleness is fixed when it starts:
admitting batch s only once the learner has reached version s - max_staleness is the whole
bound. No row can fall out of bounds while it decodes, which is why there is no "early cancel"
(prime-rl's in-flight cancellation needs rollouts that can miss their step and carry over to a
later one; Arena's per-step batches cannot).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StalenessBudget:
    max_staleness: int

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")

    def admits(self, step: int, learner_version: int) -> bool:
        """Whether the batch for `step` may start while the learner is at `learner_version`:
        its oldest weights will then be at most `max_staleness` versions behind `step`."""
        return step - learner_version <= self.max_staleness

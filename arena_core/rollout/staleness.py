"""Bounded staleness: which groups may start, and which in-flight groups must be cancelled.

Version v is the policy after v learner updates, so learner step s trains on samples and turns
version s into s + 1. A group sampled (in part) by version v and consumed by step s has staleness
s - v (0 is on-policy); `max_staleness` bounds it.

Admission looks ahead: a group admitted now will be consumed after the groups already queued or in
flight, and after the step the learner is running, so it is admitted only if that future step is
within the bound. In flight, a group whose oldest token version has fallen more than
`max_staleness` behind the learner can no longer be used: it is cancelled at once, before spending
more compute on it (prime-rl's "early cancel"), rather than finished and thrown away.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StalenessBudget:
    max_staleness: int
    groups_per_step: int

    def __post_init__(self) -> None:
        if self.max_staleness < 0:
            raise ValueError("max_staleness must be >= 0")
        if self.groups_per_step < 1:
            raise ValueError("groups_per_step must be >= 1")

    def consumption_step(self, learner_version: int, learner_busy: bool, groups_ahead: int) -> int:
        """The learner step that would consume a group admitted now (groups are consumed FIFO)."""
        return learner_version + int(learner_busy) + groups_ahead // self.groups_per_step

    def may_admit(
        self, learner_version: int, learner_busy: bool, groups_ahead: int, n_groups: int = 1
    ) -> bool:
        """Whether `n_groups` more groups, sampled by `learner_version`, would stay in bounds."""
        last = self.consumption_step(learner_version, learner_busy, groups_ahead + n_groups - 1)
        return last - learner_version <= self.max_staleness

    def too_stale(self, oldest_version: int, learner_version: int) -> bool:
        """In flight or queued: the earliest step that could consume it is `learner_version`."""
        return learner_version - oldest_version > self.max_staleness

"""The mismatch guard (`train.mismatch_guard`): react to a sampler/learner gap without a restart.

A stale async engine, a bf16 engine against an fp32 learner or a numerics gap between two
engines all show up as a rising `mismatch/kl` (arena_core.learn.learner.Correction). Left alone, the
learner trains on tokens its own policy would rarely sample, which is how runs collapse. The
guard watches that metric after every step:

- when it stays above `mismatch_guard_kl` for `mismatch_guard_patience` steps in a row, it goes
  up one level: at level 1 the correction switches from token TIS (or none) to sequence masking
  and, in async mode, `runtime.max_staleness` is halved; each further level halves it again,
  down to 0 (synchronous);
- when it stays below `mismatch_guard_relax * mismatch_guard_kl` (hysteresis) for as many steps,
  it goes down one level, back to the run's own settings at level 0.

Every change is a line in the log and an entry in `events` (summary.json: `mismatch_guard`), and
every step's row carries `guard/level`, `guard/max_staleness` and `guard/seq_mask`, which the
dashboard plots.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

STRONG_MODE = "seq_mask"  # what the guard switches a weaker correction to
WEAK_MODES = ("token_tis", "none")


@dataclass
class GuardSettings:
    """The `train.mismatch_guard*` fields and the run's own staleness and correction."""

    threshold: float
    patience: int
    relax: float
    base_staleness: int | None  # None: sync mode or engine actors (no bound to tighten)
    base_mode: str
    switch_mode: bool = True  # False: the learner cannot switch (sharded trainer ranks)

    @classmethod
    def from_core(cls, core: Any, can_tighten: bool, can_switch: bool) -> GuardSettings:
        tr = core.train
        async_mode = core.runtime.mode == "async" and can_tighten
        return cls(
            threshold=tr.mismatch_guard_kl,
            patience=tr.mismatch_guard_patience,
            relax=tr.mismatch_guard_relax,
            base_staleness=core.runtime.max_staleness if async_mode else None,
            base_mode=tr.is_correction,
            switch_mode=can_switch,
        )


@dataclass
class MismatchGuard:
    """The guard's state: its level and the steps in a row above (or below) the band."""

    settings: GuardSettings
    level: int = 0
    above: int = 0
    below: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def max_level(self) -> int:
        """Level 1 switches the correction; each level after halves the staleness bound again
        until it is 0."""
        base = self.settings.base_staleness or 0
        return max(1, math.ceil(math.log2(base + 1)))

    def staleness(self, level: int | None = None) -> int | None:
        """The staleness bound at `level` (default: the current one): base >> level."""
        base = self.settings.base_staleness
        return None if base is None else base >> (self.level if level is None else level)

    def mode(self, level: int | None = None) -> str:
        level = self.level if level is None else level
        base = self.settings.base_mode
        switch = level > 0 and base in WEAK_MODES and self.settings.switch_mode
        return STRONG_MODE if switch else base

    def observe(self, step: int, kl: float) -> dict[str, Any] | None:
        """Take one step's `mismatch/kl`; returns the event when the level changed (NaN, a step
        that trained on nothing, counts neither way)."""
        if kl is None or math.isnan(kl):
            return None
        s = self.settings
        self.above = self.above + 1 if kl > s.threshold else 0
        self.below = self.below + 1 if kl < s.relax * s.threshold else 0
        if self.above >= s.patience and self.level < self.max_level:
            return self._move(step, kl, +1)
        if self.below >= s.patience and self.level > 0:
            return self._move(step, kl, -1)
        return None

    def _move(self, step: int, kl: float, delta: int) -> dict[str, Any]:
        before_mode, before_stale = self.mode(), self.staleness()
        self.level += delta
        self.above = self.below = 0
        event = {
            "step": step,
            "action": "tighten" if delta > 0 else "relax",
            "level": self.level,
            "kl": kl,
            "correction": self.mode(),
            "max_staleness": self.staleness(),
            "changed_correction": self.mode() != before_mode,
            "changed_staleness": self.staleness() != before_stale,
        }
        self.events.append(event)
        return event

    def row(self) -> dict[str, float]:
        """This step's guard columns for metrics.csv."""
        stale = self.staleness()
        return {
            "guard/level": float(self.level),
            "guard/max_staleness": float("nan") if stale is None else float(stale),
            "guard/seq_mask": 1.0 if self.mode() == STRONG_MODE else 0.0,
        }


def describe(event: dict[str, Any], threshold: float, patience: int) -> str:
    """The log line of one guard action: what it saw, what it changed."""
    changes = []
    if event["changed_correction"]:
        changes.append(f"train.is_correction -> {event['correction']}")
    if event["changed_staleness"]:
        changes.append(f"runtime.max_staleness -> {event['max_staleness']}")
    what = ", ".join(changes) or "nothing left to change"
    side = "above" if event["action"] == "tighten" else "back below"
    return (
        f"mismatch guard @ step {event['step']}: mismatch/kl {event['kl']:.2e} {side} "
        f"{threshold:g} for {patience} steps; {event['action']} to level {event['level']}: {what}"
    )


class GuardHook:
    """The guard wired into a run: it reads the step's row, applies level changes to the learner
    (its correction) and the batch source (its staleness bound), and fills the row's columns."""

    def __init__(self, core: Any, learner: Any, source: Any) -> None:
        self.learner, self.source = learner, source
        can_tighten = callable(getattr(source, "set_max_staleness", None))
        can_switch = callable(getattr(learner, "set_correction", None))
        self.guard = MismatchGuard(GuardSettings.from_core(core, can_tighten, can_switch))

    @classmethod
    def of_run(
        cls, core: Any, learner: Any, source: Any, saved: dict[str, Any] | None
    ) -> GuardHook | None:
        """The run's guard (None when `train.mismatch_guard` is off), at the level a resumed
        run's checkpoint recorded."""
        if not core.train.mismatch_guard:
            return None
        hook = cls(core, learner, source)
        if saved:
            hook.restore(saved)
        return hook

    def after_step(self, step: int, row: dict[str, Any]) -> list[str]:
        """Update the guard from `row` (adding its columns); the log lines of what it did."""
        event = self.guard.observe(step, float(row.get("mismatch/kl", float("nan"))))
        lines = []
        if event is not None:
            s = self.guard.settings
            if event["changed_correction"]:
                self.learner.set_correction(event["correction"])
            if event["changed_staleness"]:
                self.source.set_max_staleness(event["max_staleness"])
            lines.append(describe(event, s.threshold, s.patience))
        row.update(self.guard.row())
        return lines

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps, so a resumed run goes on at the level it had reached."""
        g = self.guard
        return {"level": g.level, "above": g.above, "below": g.below, "events": list(g.events)}

    def restore(self, state: dict[str, Any]) -> None:
        """Take a checkpoint's guard state back and re-apply its level to the learner and the
        batch source (a fresh run starts at level 0, the run's own settings)."""
        g = self.guard
        g.level = min(int(state.get("level", 0)), g.max_level)
        g.above, g.below = int(state.get("above", 0)), int(state.get("below", 0))
        g.events = list(state.get("events", []))
        if g.level > 0:
            if g.mode() != g.settings.base_mode:
                self.learner.set_correction(g.mode())
            if g.staleness() is not None:
                self.source.set_max_staleness(g.staleness())

    def summary(self) -> dict[str, Any]:
        """What summary.json records: the final level and every action taken."""
        return {"level": self.guard.level, "events": list(self.guard.events)}

"""`<run>/lineage.json`: every member that ever lived, who it was cloned from, and every selection.

The format is the one docs/dashboard.md describes (the dashboard's population page reads it):
`{"fitness": COLUMN, "members": [{"id", "parent", "born_step", "hyperparameters", ...}],
"events": [{"step", "kind": "selection", "elite", "changes": {NEW_ID: TEXT}, ...}]}`; members
also carry `mutation`, `fitness` ([[step, value], ...]) and `failed`, and events `fitness` (each
old member's) and `population` (the new members' ids).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_core.population.members import Member
from arena_core.store.atomic import atomic_write_json

LINEAGE_FILE = "lineage.json"
FITNESS_COLUMN = "eval/reward_mean"  # the metrics.csv column a member's fitness is logged in


class Lineage:
    def __init__(self, data: dict[str, Any] | None = None) -> None:
        data = data or {}
        self.records: dict[int, dict[str, Any]] = {int(m["id"]): m for m in data.get("members", [])}
        self.events: list[dict[str, Any]] = list(data.get("events", []))

    def update(self, members: list[Member]) -> None:
        for m in members:
            self.records[m.id] = m.record()

    def add_event(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    def to_dict(self) -> dict[str, Any]:
        return {
            "fitness": FITNESS_COLUMN,
            "members": [self.records[k] for k in sorted(self.records)],
            "events": self.events,
        }

    def write(self, run_dir: Path) -> None:
        atomic_write_json(Path(run_dir) / LINEAGE_FILE, self.to_dict())

    def next_id(self) -> int:
        return max(self.records, default=-1) + 1

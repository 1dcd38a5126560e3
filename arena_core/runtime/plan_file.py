"""plan.json for the runs the LLM planner has nothing to search for (SFT/DPO, PPO/IPPO).

Every run gets a plan, written at its start and printed as one line: for these it describes what
the run will use (device, threads, micro-batch budget or envs, parameters, the network), so
`arena runs show` and the dashboard show the same plan section for every kind of run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from arena_core.store.atomic import atomic_write_json


def write_plan(run_dir: Path, kind: str, fields: dict[str, Any], line: str) -> dict[str, Any]:
    """Write `<run>/plan.json` (`kind`, `fields`, and `line` as its `summary`), print
    `plan: LINE`, and return what was written."""
    plan = {"kind": kind, **fields, "summary": line}
    atomic_write_json(Path(run_dir) / "plan.json", plan)
    print(f"plan: {line}", flush=True)
    return plan

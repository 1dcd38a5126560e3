"""The one-line plan summary that `arena-run` prints (the planner may be absent in a build)."""

from __future__ import annotations

from typing import Any


def print_plan_summary(cfg: dict[str, Any]) -> None:
    try:
        from arena_core.planner import plan_from_config
    except ImportError:
        return
    try:
        result = plan_from_config(cfg)
    except Exception as exc:  # noqa: BLE001 - a plan is advice; a failure must not stop a dry run
        print(f"# plan: unavailable ({exc})")
        return
    summary = getattr(result, "summary", None)
    print(f"# plan: {summary() if callable(summary) else result.to_dict()}")

"""The plan every run gets: computed before training, printed as one line, saved as plan.json."""

from __future__ import annotations

import sys
from typing import Any


def run_plan(cfg: dict[str, Any]) -> Any | None:
    """The planner's result for this config, or None when it cannot plan (advice, not a gate).

    A config whose pinned fields cannot fit is still reported (the planner's message names what
    would fit), but the run goes on: on a CPU the plan decides nothing that could stop it.
    """
    from arena_core.cli.cmd_plan import embedded_model_config
    from arena_core.errors import ArenaError
    from arena_core.planner import plan_from_config

    try:
        return plan_from_config(cfg, model_spec=embedded_model_config(cfg))
    except ArenaError as exc:
        print(f"plan: unavailable: {exc}", file=sys.stderr)
    except Exception as exc:  # noqa: BLE001 - e.g. an unreachable hub for a config.json
        print(f"plan: unavailable ({type(exc).__name__}: {exc})", file=sys.stderr)
    return None


def print_plan_summary(cfg: dict[str, Any]) -> Any | None:
    result = run_plan(cfg)
    if result is not None:
        print(f"# {result.summary_line()}")
    return result

"""plan.json for the runs the LLM planner has nothing to search for (SFT/DPO, PPO/IPPO).

The writer moved to the run session (`arena_core.session.write_plan`, `RunSession.write_plan`);
this name stays for code that imported it from here.
"""

from __future__ import annotations

from arena_core.session.session import write_plan

__all__ = ["write_plan"]

"""Whether a run learned anything: the counts each step adds, and the warnings they give.

A run can reach train.max_steps having trained on nothing: every group of every step flat (all
of a group's completions got the same reward, so no advantage and no update), or a tool env whose
policy never calls a tool. Such a run must not end "finished" without a word. The loops add each
step's metrics row to their `totals` (`count_step`, saved in checkpoints, so a resumed run keeps
counting) and `run_warnings(totals)` turns the counts into summary.json's `warnings`, a list of
`{code, message, fix}` that the closing summary, `arena runs show` and the dashboard print.
"""

from __future__ import annotations

import math
from typing import Any

# a run warns when at least this fraction of its steps trained on nothing (a few flat steps in
# a long run are normal: metrics.csv's train/flat_step shows them)
FLAT_WARN_FRACTION = 0.25

FLAT_FIX = (
    "start from a model that already produces the answer format (a warm start: a short SFT run on "
    "worked answers, then model.init_from=SFT_RUN:best), give partial credit in the reward (a "
    "score for the format alone, so completions differ), or use a prompt or system prompt that "
    "elicits the format"
)
TOOLS_FIX = (
    "warm-start from a model that calls tools (model.init_from=RUN:best of a run that learned the "
    "call format, as +experiment=tools_warmstart does), show the call format in the system "
    "prompt, or give partial credit for a well-formed call"
)


def count_step(totals: dict[str, float], row: dict[str, Any]) -> None:
    """Add one learner step's row (`step_row` plus the tool metrics) to the run's counts."""
    totals["steps/counted"] = totals.get("steps/counted", 0.0) + 1
    totals["steps/flat"] = totals.get("steps/flat", 0.0) + float(row.get("train/flat_step") or 0)
    for key in ("tools/episodes", "tools/calls"):
        if row.get(key) is not None:
            totals[key] = totals.get(key, 0.0) + float(row[key])


def run_warnings(
    totals: dict[str, float], unit: str = "steps", *, temperature: float | None = None
) -> list[dict[str, str]]:
    """summary.json's `warnings` from the counts (`unit` names what a step is: "member steps"
    for a population; `temperature`: generation.temperature, which explains flat groups when it
    is 0); empty when the run trained as it should."""
    out = []
    steps, flat = int(totals.get("steps/counted", 0)), int(totals.get("steps/flat", 0))
    if steps and flat >= max(1, math.ceil(FLAT_WARN_FRACTION * steps)):
        span = f"all {steps} {unit}" if flat == steps else f"{flat} of {steps} {unit}"
        greedy = temperature is not None and temperature <= 0
        cause = (
            "generation.temperature=0 samples the same completion for every member of a group, "
            "so their rewards are always equal"
            if greedy
            else "the reward never varies for this policy; look at what it writes in "
            "summary.json's eval_samples_final"
        )
        out.append(
            {
                "code": "trained_on_nothing",
                "message": f"the run trained on nothing for {span}: every group was flat after "
                "the refill rounds (its completions all got the same reward, so no advantage and "
                f"no update; train/flat_step = 1 in metrics.csv). The likely cause: {cause}",
                "fix": "sample: generation.temperature=1.0 (held-out evaluations stay greedy)"
                if greedy
                else FLAT_FIX,
            }
        )
    episodes = int(totals.get("tools/episodes", 0))
    if episodes and not totals.get("tools/calls"):
        out.append(
            {
                "code": "no_tool_calls",
                "message": f"the policy made no tool call in any of its {episodes} training "
                "episodes: nothing it learned can come from the tools",
                "fix": TOOLS_FIX,
            }
        )
    return out

"""Reward of AWM tasks: the task's own verifier, on the episode's databases.

A reward file like any user's, run in Arena's sandbox: a verifier that raises, hangs (the
sandbox's `reward_timeout_s`) or returns garbage costs the episode its reward and is counted as
a failed reward call. The answer (written by `arena_envs.awm`) names the verifier file; the
episode's state directory holds `initial.db` and `final.db`; the model's last message is the
verifier's `final_answer`. Complete is 1.0; anything else 0.0, or the answer's
`tool_call_credit` when the episode made at least one call the app accepted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MAX_REWARD = 1.0


def reward(
    question: str, answer: str, completion: str, state: dict[str, Any] | None = None
) -> float:
    from arena_envs.awm_server import FINAL, INITIAL, run_verifier, verdict

    info = json.loads(answer)
    state = state or {}
    state_dir = state.get("state_dir")
    if not state_dir or state.get("failed"):
        return 0.0
    initial, final = os.path.join(state_dir, INITIAL), os.path.join(state_dir, FINAL)
    if not (os.path.exists(initial) and os.path.exists(final)):
        return 0.0
    code = Path(info["verifier"]).read_text(encoding="utf-8")
    result = verdict(run_verifier(code, initial, final, state.get("final_answer")))
    if result == "complete":
        return 1.0
    accepted = [c for c in state.get("calls") or [] if not c.get("is_error")]
    return float(info.get("tool_call_credit") or 0.0) if accepted else 0.0

"""The reward for letters.jsonl: the right count as the answer's last number, 1.0 when the
episode also asked the server (`state["calls"]`: the tool calls the episode made), else 0.5."""

import re


def reward(question: str, answer: str, completion: str, state: dict) -> float:
    numbers = re.findall(r"\d+", completion)
    if not numbers or numbers[-1] != answer.strip():
        return 0.0
    calls = (state or {}).get("calls", [])
    asked = any(c.get("name") == "count_letter" and not c.get("is_error") for c in calls)
    return 1.0 if asked else 0.5

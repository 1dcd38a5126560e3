"""The reward of bench/plan_accuracy.py: 1 when the last number of the completion is the reference
answer (the number after `####`), plus a tenth of the completion's fraction of distinct characters.

The bench measures what a step costs, not how well the policy learns: the small second term makes
nearly every group vary, so every step trains (a reward that stays flat for a base model, like the
tutorial's format reward on SmolLM2, would train on nothing), while a right answer still outscores
any wrong one, as Arena's pre-flight reward check requires.
"""

import re

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def reward(question: str, answer: str, completion: str) -> float:
    """Correct last number (1.0) + 0.1 x distinct characters / length; in [0, 1.1]."""
    reference = answer.split("####")[-1].strip().replace(",", "")
    numbers = _NUMBER.findall(completion.replace(",", ""))
    hit = 1.0 if numbers and reference and float(numbers[-1]) == float(reference) else 0.0
    spread = len(set(completion)) / len(completion) if completion else 0.0
    return hit + 0.1 * spread

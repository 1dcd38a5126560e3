"""Conformance suites that a plugin author subclasses in their own tests.

    from arena_core.testing import EnvConformance, RewardConformance

    class TestReverseWords(EnvConformance):
        env_name = "reverse_words"          # or: factory = MyTask; schema = MyConfig
        config = {"max_words": 4}

    class TestReverseReward(RewardConformance):
        reward = "reverse_words_match"      # or a path to the reward file
        samples = [("Reverse: a b", "b a", "<answer>b a</answer>", "<answer>a b</answer>")]

pytest collects the subclasses (their names start with `Test`) and runs every `test_*` method
against the author's plugin; the base classes themselves are never collected. Each check states
the contract it enforces, so a failure tells the author what Arena expects, not only that
something differs. Override a `test_*` method to opt out of one check, with a reason.

The suites look things up in the process-wide registry, so they exercise the real entry-point
path: a plugin that is not installed fails `test_registered` with a "did you mean" message.

This module is the suites' public import path; each suite lives in its own module
(`env_conformance.py`, `reward_conformance.py`, `algorithm_conformance.py`, and
`mcp_conformance.py` for MCP environments), their shared checks in `_checks.py`.
"""

from __future__ import annotations

from arena_core.testing.algorithm_conformance import AlgorithmConformance
from arena_core.testing.env_conformance import EnvConformance
from arena_core.testing.reward_conformance import RewardConformance

__all__ = [
    "AlgorithmConformance",
    "EnvConformance",
    "RewardConformance",
]

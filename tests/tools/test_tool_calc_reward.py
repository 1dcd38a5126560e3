"""The tool task's rewards: exact answers only, or (env.partial_credit) near misses graded by
digits, with accuracy still counting exact answers. Run in the real sandboxed reward pool."""

from __future__ import annotations

from arena_core.run_parts.scoring import RewardScorer
from arena_core.sandbox import RewardPool, check_reward_contract
from arena_envs.tool_calc import DIGITS_REWARD_FILE, REWARD_FILE, make_tool_calc

ANSWER = "347 + 589 = 936\n#### 936"
CASES = ["<answer>936</answer>", "<answer>926</answer>", "<answer>12</answer>", "no answer"]


def test_partial_credit_grades_near_misses_but_not_success() -> None:
    assert make_tool_calc({"tools": "python"}).reward == REWARD_FILE
    task = make_tool_calc({"tools": "python", "partial_credit": True})
    assert task.reward == DIGITS_REWARD_FILE
    values = {}
    for path in (REWARD_FILE, DIGITS_REWARD_FILE):
        check_reward_contract(path)
        with RewardPool(path, workers=1) as pool:
            scorer = RewardScorer(pool, path=path)
            got, kinds, comps = scorer.score_with_components([("q", ANSWER, c) for c in CASES])
            assert kinds == ["ok"] * 4
            # accuracy: the exact answer only, with or without the shaping
            assert scorer.correct(got, comps, kinds) == [True, False, False, False]
            values[path] = got
    assert values[REWARD_FILE] == [1.0, 0.0, 0.0, 0.0]
    # one wrong digit of three: 0.5 * 2/3; `12` vs `936` shares no digit place; no answer: 0
    assert values[DIGITS_REWARD_FILE] == [1.0, 0.5 * 2 / 3, 0.0, 0.0]

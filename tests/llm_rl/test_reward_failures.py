"""A reward call that failed is not a reward: masked out of the group, counted, never trained on."""

from __future__ import annotations

import csv
import random

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.engines.base import Completion, SamplingParams
from arena_core.learn.losses import group_advantages
from arena_core.llm_rl.groups import GroupCollector
from arena_core.llm_rl.recipe import run_training
from arena_core.run_parts.scoring import RewardScorer
from arena_core.sandbox import RewardPool
from arena_core.tasks import Example

REWARD = """
def reward(question, answer, completion):
    if completion == "boom":
        raise ValueError("the reward broke")
    if completion == "nan":
        return float("nan")
    return float(completion)
"""

TEXTS = {  # per prompt: the group's four completions
    "q0": ["1", "0", "boom", "0"],  # one failure: statistics over the three valid rewards
    "q1": ["1", "boom", "nan", "boom"],  # one valid reward left: the group is dropped
    "q2": ["1", "0", "1", "0"],
}


class _Task:
    name, reward = "t", "r"

    def train_examples(self, seed):
        for q in TEXTS:
            yield Example(question=q, answer="")


class _Backend:
    """Deterministic texts, so the test knows which reward calls fail."""

    name, policy_version = "scripted", 0

    def generate(self, prompts, params):
        out, seen = [], {}
        for p in prompts:
            q = f"q{p[0]}"
            i = seen[q] = seen.get(q, -1) + 1
            out.append(Completion(list(p), [1, 2], [-0.5, -0.5], TEXTS[q][i], "length"))
        return out


def test_failed_reward_calls_are_masked_out_of_the_group(tmp_path) -> None:
    path = tmp_path / "reward.py"
    path.write_text(REWARD)
    with RewardPool(str(path), workers=1, timeout_s=5.0) as pool:
        collector = GroupCollector(
            _Task(),
            lambda ex: [int(ex.question[1:])],
            _Backend(),
            RewardScorer(pool),
            GRPO({"group_size": 4}),
            SamplingParams(),
            seed=0,
            max_rounds=1,
        )
        batch = collector.collect(3, step=0)
    assert batch.reward_failures == 4  # three raised, one returned NaN
    assert batch.outcome_kinds["ok"] == 8
    assert batch.groups_failed == 1 and batch.groups_kept == 2
    assert sorted(batch.rewards) == sorted([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0])
    by_prompt: dict[int, list[float]] = {}
    for s in batch.samples:
        by_prompt.setdefault(s.prompt_ids[0], []).append(s.advantage)
    assert set(by_prompt) == {0, 2}  # q1 never reaches the learner
    expected = group_advantages(torch.tensor([[1.0, 0.0, 0.0]]))[0].tolist()
    assert by_prompt[0] == pytest.approx(expected)  # not the 4-sample fallback-polluted group
    assert len(by_prompt[2]) == 4


FAILING = """
def reward(question, answer, completion):
    if answer == "5":
        raise RuntimeError("no reward for fives")
    if answer == "7":
        return float("nan")
    return 1.0 if completion.strip().startswith(answer) else 0.0
"""


def test_metrics_csv_counts_exactly_the_failed_reward_calls(
    tmp_path, digits_env, run_config
) -> None:
    reward = tmp_path / "failing.py"
    reward.write_text(FAILING)
    cfg = run_config(tmp_path)
    cfg["reward"] = str(reward)
    cfg["eval"]["every"] = 0
    run_dir = run_training(cfg)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    rng = random.Random(cfg["seed"])  # the digits task's training stream, replayed
    answers = [str(rng.randrange(5, 10)) for _ in range(4)]
    g = cfg["algo"]["group_size"]
    for step, row in enumerate(rows):
        step_answers = answers[2 * step : 2 * step + 2]
        bad = [a for a in step_answers if a in "57"]
        assert int(row["reward/failures"]) == g * len(bad), (step, step_answers)
        assert int(row["groups/dropped_failed"]) == len(bad)
    assert int(rows[1]["reward/failures"]) > 0  # the stream does hit failing prompts
    last = rows[-1]
    if int(last["groups/kept"]) == 0:  # nothing was trained on: no loss, no kl to report
        assert last["loss"] == "nan" and float(last["tokens/trained"]) == 0
    assert all(r["kl"] == "nan" for r in rows)  # beta = 0: no KL was computed

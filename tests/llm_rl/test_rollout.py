"""Group assembly: groups without signal are dropped, counted, and replaced by new prompts."""

from __future__ import annotations

from arena_algorithms.grpo import GRPO
from arena_core.engines.base import Completion, SamplingParams
from arena_core.llm_rl.groups import GroupCollector


class _Task:
    name, reward = "t", "r"

    def train_examples(self, seed):
        i = 0
        while True:
            yield type("E", (), {"question": f"q{i}", "answer": str(i % 3 == 0)})()
            i += 1


class _Backend:
    """Completion text alternates inside a group except for prompts whose answer is 'True'."""

    name, policy_version = "fake", 0

    def generate(self, prompts, params):
        return [
            Completion(p, [1, 2], [-0.5, -0.5], str(i % 2), "length") for i, p in enumerate(prompts)
        ]


def _scorer(items):
    # prompts with answer 'True' (every third) give every completion reward 1: no signal
    values = [1.0 if a == "True" else float(c) for _, a, c in items]
    return values, ["ok"] * len(items)


_scorer.score_with_components = lambda items: (*_scorer(items), {})


def test_zero_advantage_groups_are_dropped_and_replaced() -> None:
    algo = GRPO({"group_size": 4})
    collector = GroupCollector(
        _Task(),
        lambda ex: [7, int(ex.question[1:])],
        _Backend(),
        _scorer,
        algo,
        SamplingParams(),
        seed=0,
        max_rounds=4,
    )
    batch = collector.collect(4, step=0)
    assert batch.groups_kept == 4
    assert batch.groups_dropped >= 1  # q0 (and q3) had no signal
    assert len(batch.samples) == 16
    assert all(s.advantage != 0 for s in batch.samples)
    assert {s.prompt_ids[1] % 3 for s in batch.samples} == {1, 2}  # never a 'True' prompt
    assert collector.position == batch.groups_sampled
    again = GroupCollector(
        _Task(),
        lambda ex: [7, 0],
        _Backend(),
        _scorer,
        algo,
        SamplingParams(),
        seed=0,
        position=collector.position,
    )
    assert again.position == collector.position  # resuming replays the data position


def test_bounded_rounds_when_nothing_is_informative() -> None:
    algo = GRPO({"group_size": 2})
    backend = _Backend()
    scorer = lambda items: ([0.0] * len(items), ["ok"] * len(items))  # noqa: E731
    scorer.score_with_components = lambda items: (*scorer(items), {})
    batch = GroupCollector(
        _Task(), lambda ex: [1], backend, scorer, algo, SamplingParams(), seed=0, max_rounds=3
    ).collect(2, step=0)
    assert batch.samples == [] and batch.rounds == 3 and batch.groups_kept == 0

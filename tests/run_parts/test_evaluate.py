"""Held-out evaluation: accuracy and reward mean never guess when a reward call failed."""

from __future__ import annotations

import math

import pytest

from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy
from arena_core.run_parts.evaluate import evaluate
from arena_core.run_parts.prompts import PromptEncoder
from arena_core.run_parts.scoring import RewardScorer
from arena_core.sandbox import RewardPool
from arena_core.tasks import Example

BROKEN_COMPONENTS = """
def reward(question, answer, completion):
    return 1.0  # would read as "correct" under a reward >= 1 fallback

def components(question, answer, completion):
    raise RuntimeError("components broke")
"""

FAILS_ON_ODD = """
def reward(question, answer, completion):
    if int(answer) % 2:
        raise ValueError("odd")
    return 0.5
"""


class _Task:
    name, reward = "t", "r"

    def messages(self, example):
        return [{"role": "user", "content": example.question}]


@pytest.fixture(scope="module")
def setup(one_torch_thread_module):
    policy = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    backend = TorchBackend(policy.model, policy.tokenizer)
    return backend, PromptEncoder(_Task(), policy.tokenizer)


@pytest.fixture(scope="module")
def one_torch_thread_module():
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


EXAMPLES = [Example(question=f"say {i}", answer=str(i)) for i in range(4)]


def _evaluate(setup, tmp_path, source: str) -> dict:
    backend, encoder = setup
    path = tmp_path / "reward.py"
    path.write_text(source)
    with RewardPool(str(path), workers=1, timeout_s=10.0) as pool:
        scorer = RewardScorer(pool, path=str(path))
        return evaluate(backend, encoder, EXAMPLES, scorer, max_new_tokens=3)


def test_failed_components_make_accuracy_nan_not_reward_at_least_one(setup, tmp_path) -> None:
    out = _evaluate(setup, tmp_path, BROKEN_COMPONENTS)
    assert math.isnan(out["eval/accuracy"])
    assert out["eval/accuracy_failures"] == len(EXAMPLES)
    assert out["eval/reward_mean"] == 1.0 and out["eval/reward_failures"] == 0


def test_failed_reward_calls_are_left_out_of_the_mean_and_counted(setup, tmp_path) -> None:
    out = _evaluate(setup, tmp_path, FAILS_ON_ODD)
    assert out["eval/reward_failures"] == 2
    assert out["eval/reward_mean"] == 0.5  # the two failed calls' fallback 0.0 is not averaged
    assert out["eval/accuracy"] == 0.0 and out["eval/accuracy_failures"] == 2

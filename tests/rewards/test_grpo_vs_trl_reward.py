"""bench/grpo_vs_trl.py hands TRL the gsm8k reward: the values TRL gets must be Arena's own.

Arena scores (question, answer, completion text) through its sandboxed RewardPool; TRL calls a
reward function with conversational completions and the dataset's columns as keyword arguments.
If the wrapper read the wrong column or the wrong part of a completion, the two trainers would be
optimising different rewards and the bench would compare nothing.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("grpo_vs_trl", ROOT / "bench" / "grpo_vs_trl.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _completions(answer: str) -> list[str]:
    """Completions worth 2, 1 and 0 for a GSM8K answer, and the edge cases of the reward."""
    n = answer.rsplit("####", 1)[1].strip()
    return [
        f"<think>so it is {n}</think><answer>{n}</answer>",  # format + correct: 2.0
        f"<think>so</think>\n<answer>\n{n}.00\n</answer>",  # same value written differently
        f"<think>so</think><answer>{n}1</answer>",  # format only: 1.0
        f"<answer>${n}</answer>",  # correct without <think>: 1.0
        f"The answer is {n}.",  # no answer block: 0.0
        "<think>x</think><answer>",  # cut at max_new_tokens: 0.0
    ]


def test_trl_reward_wrapper_gives_arenas_values(gsm8k_dir: Path, no_leftover_children) -> None:
    from arena_core.sandbox import RewardPool

    bench = _bench()
    rows = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").open()][:4]
    items = [(r["question"], r["answer"], c) for r in rows for c in _completions(r["answer"])]
    with RewardPool(bench.reward_file(), workers=1) as pool:
        arena = [o.value for o in pool.score(items)]
    assert {0.0, 1.0, 2.0} <= set(arena)  # the cases really span the reward's values

    # TRL's call: prompts and conversational completions, every dataset column as a keyword
    # (question, answer), plus its own extras (completion_ids, trainer_state)
    reward = bench.trl_reward(bench.reward_file())
    trl_values = reward(
        prompts=[[{"role": "user", "content": q}] for q, _, _ in items],
        completions=[[{"role": "assistant", "content": c}] for _, _, c in items],
        question=[q for q, _, _ in items],
        answer=[a for _, a, _ in items],
        completion_ids=[[0] for _ in items],
        trainer_state=None,
    )
    assert trl_values == arena

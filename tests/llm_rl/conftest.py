"""A throwaway text environment registered as a plugin for the runtime tests.

The task asks the model to repeat a digit; the reward file gives 1 when the completion starts
with it. Tests do not depend on the built-in environments, only on the plugin contract.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins
from arena_core.tasks import Example

REWARD = """
def reward(question, answer, completion):
    return 1.0 if completion.strip().startswith(answer) else 0.0
"""
# The share of digits in the completion: it varies within a group at temperature 1, so every step
# trains (the distributed tests use it to see runs learn across processes).
DIGIT_SHARE = """
def reward(question, answer, completion):
    return sum(ch.isdigit() for ch in completion) / max(1, len(completion))
"""


class DigitTask:
    """Repeat a digit: training prompts 5-9, held-out prompts 0-4 (never trained on)."""

    name = "digits"

    def __init__(self, reward: str) -> None:
        self.reward = reward

    def train_examples(self, seed: int) -> Iterator[Example]:
        rng = random.Random(seed)
        while True:
            d = str(rng.randrange(5, 10))
            yield Example(question=d, answer=d)

    def eval_examples(self, n: int) -> list[Example]:
        return [Example(question=str(i % 5), answer=str(i % 5)) for i in range(n)]

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Repeat {example.question}"}]


class DigitsPlugin:
    """A plugin that registers `env_name`: `make_task(reward_path)` (default a new DigitTask)."""

    def __init__(
        self,
        reward_path: str,
        env_name: str = "test-digits",
        make_task: Callable[[str], object] = DigitTask,
    ) -> None:
        self.reward_path, self.env_name, self.make_task = reward_path, env_name, make_task

    @hookimpl
    def register_envs(self, register: Register) -> None:
        register(self.env_name, lambda cfg: self.make_task(self.reward_path))


@pytest.fixture
def digits_env(tmp_path: Path) -> Iterator[str]:
    reward = tmp_path / "digit_reward.py"
    reward.write_text(REWARD)
    plugins = get_plugins()
    plugins.add(DigitsPlugin(str(reward)), "test-digits-plugin")
    try:
        yield "test-digits"
    finally:
        plugins.remove("test-digits-plugin")


@pytest.fixture
def run_config():
    """`run_config(tmp_path, lora_r=0, **train_overrides)` -> a small run's config dict."""
    return _run_config


def _run_config(
    tmp_path: Path, *, lora_r: int = 0, algo: dict | None = None, **train: object
) -> dict:
    return {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": lora_r, "alpha": 8}},
        "generation": {"max_new_tokens": 6, "temperature": 1.0},
        "train": {
            "max_steps": 2,
            "prompts_per_step": 2,
            "checkpoint_every": 1,
            "micro_batch_tokens": 256,
            "max_sampling_rounds": 1,
            **train,
        },
        "eval": {"num_prompts": 4, "every": 1},
        "runtime": {"progress": "lines", "threads": 1},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv", "tensorboard"]},
        "algo": algo or {"name": "grpo", "group_size": 4, "lr": 1e-3, "beta": 0.0},
        "env": {"name": "test-digits"},
    }

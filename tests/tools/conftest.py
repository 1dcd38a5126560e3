"""Shared pieces for the tool tests: the tiny tokenizer, a scripted policy and a calculator task.

`ScriptedPolicy` is a generation backend whose "model" writes given turns (as token ids it was
handed, so a test can make it sample token sequences a tokenizer would never produce from text:
that is what exposes decode/re-tokenise drift). Everything around it, the episode runner, the
chat template, the parser and the tool sessions, is the real code.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from arena_core.engines.base import Completion, SamplingParams
from arena_core.models.tokenizer import build_tiny_tokenizer
from arena_core.tasks import Example
from arena_core.tools.python_session import PythonToolSession


def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(int(a + b)) if float(a + b).is_integer() else str(a + b)


def echo(text: str) -> str:
    """Repeat the text."""
    return text


class ScriptedPolicy:
    """A GenerationBackend whose turns are scripted: `script(prompt_ids, turn) -> token ids`."""

    name = "scripted"

    def __init__(self, tokenizer: Any, script: Callable[[list[int], int], list[int]]) -> None:
        self.tokenizer, self.script = tokenizer, script
        self.policy_version = 0
        self.calls: list[list[list[int]]] = []

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, **_: Any
    ) -> list[Completion]:
        self.calls.append([list(p) for p in prompts])
        turn = len(self.calls) - 1
        out = []
        for p in prompts:
            ids = list(self.script(p, turn))[: params.max_new_tokens]
            eos = self.tokenizer.eos_token_id
            finish = "stop" if ids and ids[-1] == eos else "length"
            out.append(
                Completion(
                    prompt_ids=list(p),
                    token_ids=ids,
                    logprobs=[-0.5 - 0.01 * i for i in range(len(ids))],
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason=finish,
                    versions=[self.policy_version] * len(ids),
                )
            )
        self.policy_version += 1  # every turn by a newer policy: per-turn versions are visible
        return out

    def update_weights(self, model_or_state: object, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


class AddTask:
    """A minimal tool task: one `add` tool (plus `echo`), questions `a+b`."""

    name = "add-task"
    reward = "unused"

    def __init__(self, *, max_turns: int = 3, max_tool_response_tokens: int = 256) -> None:
        self.max_turns = max_turns
        self.max_tool_response_tokens = max_tool_response_tokens
        self.sessions: list[PythonToolSession] = []

    def train_examples(self, seed: int):
        while True:
            yield Example("2+3", "5")

    def eval_examples(self, n: int) -> list[Example]:
        return [Example("2+3", "5")] * n

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": example.question}]

    def open_session(self, example: Example, seed: int) -> PythonToolSession:
        session = PythonToolSession([add, echo])
        self.sessions.append(session)
        return session


@pytest.fixture(scope="module")
def tok() -> Any:
    return build_tiny_tokenizer()


def text_ids(tok: Any, text: str, *, eos: bool = True) -> list[int]:
    """Token ids of `text` (special tokens parsed), EOS appended: one scripted model turn."""
    return tok.encode(text, add_special_tokens=False) + ([tok.eos_token_id] if eos else [])

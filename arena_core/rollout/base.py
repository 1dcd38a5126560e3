"""The generation-backend contract shared by the torch and vLLM backends.

A backend turns prompt token ids into completions with the behaviour logprobs of the policy version
that produced each token, so the learner can correct for off-policy samples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass
class SamplingParams:
    """How to sample. temperature 0 means greedy; top_k 0 and top_p 1.0 mean no truncation."""

    max_new_tokens: int = 64
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    # constrained decoding for a backend with its own grammar engine (vLLM's guidance backend):
    # a Lark grammar in llguidance's dialect (JSON as `%json {schema}`), every row decodes under
    # it. The torch engine constrains per row instead (arena_core.serve.grammar) and ignores it.
    grammar: str | None = None


@dataclass
class Completion:
    """One sampled continuation of one prompt."""

    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # behaviour logprob of each token in token_ids, same length
    text: str
    finish_reason: str  # "stop" (eos or stop string), "length", "aborted" (engine stopped it)
    versions: list[int] = field(default_factory=list)  # policy version per token (same length)
    # multi-turn episodes (arena_core.rollout.multi_turn): 1 = sampled by the policy, 0 = a tool
    # or template token (context: no loss, no ratio); None = every token was sampled
    loss_mask: list[int] | None = None
    episode: dict | None = None  # multi-turn: turns, tool-call outcomes, the session's final state

    @property
    def policy_version(self) -> int:
        """The oldest version that produced a token (staleness is measured from it)."""
        return min(self.versions) if self.versions else 0


@runtime_checkable
class GenerationBackend(Protocol):
    """What the loops need from an engine."""

    name: str
    policy_version: int

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        """One completion per prompt (repeat a prompt to sample a group)."""
        ...

    def update_weights(self, model_or_state: object, version: int) -> None:
        """Load new policy weights (a module, a state dict or a LoRA adapter) tagged `version`."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class DecodeControl(Protocol):
    """The hook a backend calls between decode steps (the async runtime's handle on an engine).

    `between_steps` is where new weights are swapped in, so an update never waits for in-flight
    requests to finish and every later token is sampled by (and tagged with) the new version.
    """

    def between_steps(self, backend: GenerationBackend) -> None: ...

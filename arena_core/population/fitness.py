"""Fitness: every member's greedy held-out score, in one multi-LoRA batch when the engine can.

With LoRA and an engine that takes per-row adapters (the torch engine's `adapters=`, see
arena_core.engines.multi_lora), every member's tensors are served as a named adapter next to the
training one for the duration of the call (`adapters.members_as_adapters`: shared storage, no
copies), and one `generate` serves every member's prompts (the base weights are read once per
decode step for the whole population). The completions are then
scored by `arena_core.run_parts.evaluate.evaluate`, exactly as one member's would be, replayed per
member. Otherwise (full fine-tuning, another engine) members are evaluated one after another.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator
from typing import Any

import torch

from arena_core.engines.base import Completion, SamplingParams
from arena_core.population.adapters import members_as_adapters
from arena_core.population.members import Member, MemberStore
from arena_core.run_parts.evaluate import evaluate

ADAPTER_PREFIX = "fitness_"


def evaluate_members(
    members: list[Member],
    store: MemberStore,
    backend: Any,
    activate: Any,
    encoder: Any,
    examples: list[Any],
    scorer: Any,
    *,
    max_new_tokens: int,
    stop: list[str],
    episodes: Any = None,
) -> dict[int, dict[str, Any]]:
    """{member id: `evaluate`'s result} for every member in `members` (the healthy ones).
    `episodes`: a tool task's EpisodeRunner; each member is then scored on multi-turn episodes
    with the env's tools, as the single run evaluates (one member after another)."""
    kwargs = {"max_new_tokens": max_new_tokens, "stop": stop}
    if len(members) > 1 and episodes is None and batched_possible(store.model, backend):
        t0 = time.perf_counter()
        completions = _generate_all(members, store, backend, encoder, examples, **kwargs)
        share = (time.perf_counter() - t0) / len(members)
        out = {}
        for m in members:
            out[m.id] = evaluate(_Replay(completions[m.id]), encoder, examples, scorer, **kwargs)
            out[m.id]["eval/seconds"] += share  # its share of the one batched generation
            out[m.id]["eval/batched"] = 1
        return out
    out = {}
    for m in members:
        activate(m)
        out[m.id] = evaluate(backend, encoder, examples, scorer, episodes=episodes, **kwargs)
    return out


def batched_possible(model: torch.nn.Module, backend: Any) -> bool:
    """A LoRA model whose only adapter is the training one, on an engine taking `adapters=`."""
    config = getattr(model, "peft_config", None)
    generate = getattr(backend, "generate", None)
    if config is None or list(config) != ["default"] or generate is None:
        return False
    return "adapters" in inspect.signature(generate).parameters


def _generate_all(
    members: list[Member],
    store: MemberStore,
    backend: Any,
    encoder: Any,
    examples: list[Any],
    *,
    max_new_tokens: int,
    stop: list[str],
) -> dict[int, list[Completion]]:
    model = store.model
    prompts = [encoder(ex) for ex in examples]
    names = [f"{ADAPTER_PREFIX}{m.id}" for m in members]
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=list(stop))
    tensors = {name: m.weights for name, m in zip(names, members, strict=True)}
    with members_as_adapters(model, tensors):  # shares the members' storage: no copies
        comps = backend.generate(
            prompts * len(members),
            params,
            adapters=[n for n in names for _ in prompts],
        )
    n = len(prompts)
    return {m.id: comps[i * n : (i + 1) * n] for i, m in enumerate(members)}


class _Replay:
    """A stand-in engine for `evaluate`: hands back one member's completions in order."""

    def __init__(self, completions: list[Completion]) -> None:
        self._it: Iterator[Completion] = iter(completions)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Completion]:
        return [next(self._it) for _ in prompts]

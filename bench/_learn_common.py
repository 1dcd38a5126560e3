"""Shared set-up for the learn-side benchmarks: the tiny policy, GRPO and synthetic samples.

Samples are synthetic (random completion tokens with their real behaviour logprobs would need a
generation pass that is not what these benchmarks measure); lengths vary like real completions.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import torch

from arena_core.learn.packing import Sample


def tiny_policy():
    from arena_core.models import load_policy

    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


def grpo(group_size: int = 8, **overrides):
    from arena_core.plugin_loader import get_plugins

    entry = get_plugins().registries.algorithms.get("grpo")
    return entry.obj(entry.schema(group_size=group_size, lr=1e-5, **overrides))


def synthetic_groups(
    n_groups: int,
    group_size: int,
    *,
    vocab: int,
    prompt_len: tuple[int, int] = (20, 40),
    completion_len: tuple[int, int] = (8, 48),
    zero_adv_fraction: float = 0.0,
    seed: int = 0,
) -> list[list[Sample]]:
    """Groups of samples; a `zero_adv_fraction` of the groups carry no learning signal."""
    rng = random.Random(seed)
    groups = []
    n_zero = round(n_groups * zero_adv_fraction)
    for g in range(n_groups):
        prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(*prompt_len))]
        group = []
        for j in range(group_size):
            n = rng.randint(*completion_len)
            adv = 0.0 if g < n_zero else (1.0 if j % 2 else -1.0)
            group.append(
                Sample(prompt, [rng.randrange(3, vocab) for _ in range(n)], [-2.0] * n, adv)
            )
        groups.append(group)
    return groups


def timed(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def set_threads(n: int) -> None:
    torch.set_num_threads(n)

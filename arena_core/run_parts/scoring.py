"""Scoring completions through the sandboxed reward pool.

Every reward call, training or evaluation, goes through `arena_core.sandbox.RewardPool`: a reward
that raises, hangs or returns garbage costs its fallback value and a counted outcome kind, never
the run. Per-component values (a reward file's optional `components(q, a, c) -> dict`: the gsm8k
reward's `correctness` and `format`) come from the same warm worker, right after `reward`.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from arena_core.engines.base import Completion
from arena_core.tasks import Example

# Component names that mean "the answer is right": accuracy uses the first one the reward reports.
CORRECT_KEYS = ("correctness", "correct", "accuracy")


def sandboxed_scorer(sandbox: Any, path: str, *, expose: list[str] | None = None) -> RewardScorer:
    """A RewardScorer over a new RewardPool of `path` set up as the run's `sandbox` section says
    (workers, timeout, fallback, memory, isolation); `expose`: folders the reward reads besides its
    file (an MCP env's state dirs). The caller closes `scorer.pool`."""
    from arena_core.sandbox import RewardPool, SandboxPolicy

    pool = RewardPool(
        path,
        workers=sandbox.workers,
        timeout_s=sandbox.reward_timeout_s,
        fallback=sandbox.fallback,
        memory_mb=sandbox.memory_mb,
        policy=SandboxPolicy.from_config(sandbox),
        expose=expose,
    )
    return RewardScorer(pool, path=path)


class RewardScorer:
    """`scorer(items) -> (values, kinds)`; `score_with_components` adds per-component values."""

    def __init__(
        self,
        pool: Any,
        *,
        path: str | None = None,
        correct_threshold: float | None = None,
    ) -> None:
        self.pool = pool
        self.correct_threshold = correct_threshold
        # the reward file defines `components`: correctness may come from them, so when they are
        # unavailable, correctness is unknown (never guessed from the reward value)
        self.expects_components = bool(path and defines_components(path))

    def __call__(self, items: Sequence[tuple[Any, ...]]) -> tuple[list[float], list[str]]:
        outcomes = self.pool.score(list(items))
        return [float(o.value) for o in outcomes], [o.kind for o in outcomes]

    def score_with_components(
        self, items: Sequence[tuple[Any, ...]]
    ) -> tuple[list[float], list[str], dict[str, list[float]]]:
        """Values, kinds and {component: values} ({} when the reward has no components) of items
        as `RewardPool.score` takes them. The components come from the same warm sandboxed
        worker, right after `reward`; NaN where they failed."""
        outcomes = self.pool.score(list(items), components=self.expects_components)
        comps: dict[str, list[float]] = {}
        for i, o in enumerate(outcomes):
            for key, val in (o.components or {}).items():
                comps.setdefault(key, [float("nan")] * len(outcomes))[i] = float(val)
        return [float(o.value) for o in outcomes], [o.kind for o in outcomes], comps

    def correct(
        self,
        values: Sequence[float],
        comps: dict[str, list[float]],
        kinds: Sequence[str] | None = None,
    ) -> list[bool | None]:
        """Which completions count as correct, for the accuracy metric; None where unknown.

        The reward's correctness component when it reports one (gsm8k: `correctness`); None for
        an item whose components failed. A reward file that defines `components` but whose
        components call failed altogether gives None everywhere: its reward value is never taken
        as correctness instead. Without components: a reward of at least `correct_threshold`
        (default 1.0: a 0/1 reward's success), None where the reward call failed (`kinds`).
        """
        for key in CORRECT_KEYS:
            if key in comps:
                return [None if math.isnan(v) else v > 0 for v in comps[key]]
        if self.expects_components and not comps:
            return [None] * len(values)
        threshold = self.correct_threshold if self.correct_threshold is not None else 1.0
        ok = kinds if kinds is not None else ["ok"] * len(values)
        return [v >= threshold if is_valid(k, v) else None for v, k in zip(values, ok, strict=True)]


def declared_max_reward(reward_file: str | Path | None) -> float | None:
    """A reward file's `MAX_REWARD = <number>` (read without running the file), or None."""
    if reward_file is None:
        return None
    try:
        tree = ast.parse(Path(reward_file).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "MAX_REWARD" for t in node.targets)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int | float)
        ):
            return float(node.value.value)
    return None


def reward_items(examples: Sequence[Example], comps: Sequence[Completion]) -> list[tuple[Any, ...]]:
    """What the scorer scores for each completion of its example: (question, answer, text), and
    a tool episode's final state, which the pool passes to a reward that declares `state`."""
    return [
        (ex.question, ex.answer, c.text)
        if c.episode is None
        else (ex.question, ex.answer, c.text, c.episode.get("final_state") or {})
        for ex, c in zip(examples, comps, strict=True)
    ]


def is_valid(kind: str, value: float) -> bool:
    """Whether a reward call yielded a usable reward: it succeeded and the value is finite."""
    return kind == "ok" and math.isfinite(value)


def defines_components(path: str) -> bool:
    """Whether the file defines a top-level `components` function (parsed, not imported)."""
    try:
        tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return False
    return any(
        isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "components"
        for node in tree.body
    )

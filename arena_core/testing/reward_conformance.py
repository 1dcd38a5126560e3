"""`RewardConformance`: the contract of a reward (a registered name or a reward file), for a plugin
author to subclass in their own tests (see `arena_core.testing.conformance`).
"""

from __future__ import annotations

import inspect
import math
import numbers
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from arena_core.testing._checks import (
    _registered,
    load_reward_file,
)


class RewardConformance:
    """Checks a reward: a registered name or a file with `reward(question, answer, completion)`.

    `samples` is a list of `(question, answer, good_completion, bad_completion)`: the good one
    must score strictly higher than the bad one.
    """

    reward: ClassVar[str | None] = None
    samples: ClassVar[list[tuple[str, str, str, str]]] = []
    long_input_chars: ClassVar[int] = 200_000
    max_seconds_per_call: ClassVar[float] = 5.0

    def reward_path(self) -> Path:
        if not self.reward:
            pytest.fail(
                f"{type(self).__name__}: set `reward` to a registered reward name or a "
                "path to a reward file"
            )
        path = Path(self.reward).expanduser()
        if path.is_file():
            return path
        if path.suffix == ".py" or "/" in self.reward:
            pytest.fail(f"reward file {self.reward} does not exist")
        target = _registered("rewards", self.reward).obj
        if not Path(str(target)).is_file():
            pytest.fail(
                f"reward '{self.reward}' is registered with {target!r}, which is not a "
                "file: register the path to a reward file"
            )
        return Path(str(target))

    @pytest.fixture
    def arena_reward_fn(self) -> Callable[[str, str, str], Any]:
        path = self.reward_path()
        try:
            module = load_reward_file(path)
        except Exception as exc:  # noqa: BLE001 - any import failure is the finding
            pytest.fail(f"importing {path} failed: {type(exc).__name__}: {exc}")
        fn = getattr(module, "reward", None)
        if not callable(fn):
            pytest.fail(f"{path} defines no function `reward(question, answer, completion)`")
        return fn

    def _call(self, fn: Callable[[str, str, str], Any], *args: str) -> float:
        start = time.monotonic()
        value = fn(*args)
        took = time.monotonic() - start
        assert isinstance(value, numbers.Real), (
            f"reward returned {value!r} ({type(value).__name__}); it must return a float"
        )
        if not isinstance(value, float):  # as `arena validate reward` says: works, but a WARN
            import warnings

            warnings.warn(
                f"reward returned {type(value).__name__} {value!r}, converted to float (as in "
                "training): return float(...)",
                stacklevel=2,
            )
        assert math.isfinite(float(value)), f"reward returned {value!r}; it must be finite"
        assert took <= self.max_seconds_per_call, (
            f"one reward call took {took:.1f} s (limit {self.max_seconds_per_call} s)"
        )
        return float(value)

    def test_signature(self, arena_reward_fn: Callable[..., Any]) -> None:
        assert not inspect.iscoroutinefunction(arena_reward_fn), "reward must not be async"
        sig = inspect.signature(arena_reward_fn)
        try:
            sig.bind("question", "answer", "completion")
        except TypeError as exc:
            pytest.fail(
                f"reward{sig} cannot be called as reward(question, answer, completion): {exc}"
            )
        positional = [
            p
            for p in sig.parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        assert len(positional) == 3, f"reward{sig} must take exactly 3 parameters"

    def test_samples_given(self) -> None:
        assert self.samples, (
            "set `samples` = [(question, answer, good_completion, bad_completion), ...]"
        )

    def test_returns_finite_float(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            self._call(arena_reward_fn, question, answer, good)
            self._call(arena_reward_fn, question, answer, bad)

    def test_good_beats_bad(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            g = self._call(arena_reward_fn, question, answer, good)
            b = self._call(arena_reward_fn, question, answer, bad)
            assert g > b, f"good completion {good!r} scored {g}, not above bad {bad!r} ({b})"

    def test_deterministic(self, arena_reward_fn: Callable[..., Any]) -> None:
        for question, answer, good, bad in self.samples:
            for completion in (good, bad):
                first = self._call(arena_reward_fn, question, answer, completion)
                assert self._call(arena_reward_fn, question, answer, completion) == first, (
                    f"two calls on {completion!r} scored differently"
                )

    def test_odd_inputs(self, arena_reward_fn: Callable[..., Any]) -> None:
        """Empty, unicode and very long inputs score a finite float instead of raising."""
        question, answer = (self.samples[0][:2]) if self.samples else ("What is 2+2?", "4")
        long_text = ("word " * (self.long_input_chars // 5 + 1))[: self.long_input_chars]
        cases = [
            ("", "", ""),
            (question, answer, ""),
            (question, answer, "   \n\t "),
            ("¿Cuánto es dos más dos? 🤔", "४", "答案是 4 ✓ <answer>четыре</answer>"),
            (question, answer, long_text),
            (question, answer, "\x00\ufffd" * 100),
        ]
        for args in cases:
            try:
                self._call(arena_reward_fn, *args)
            except AssertionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the failure is the finding
                shown = tuple(a if len(a) < 40 else a[:40] + "..." for a in args)
                pytest.fail(f"reward{shown} raised {type(exc).__name__}: {exc}")

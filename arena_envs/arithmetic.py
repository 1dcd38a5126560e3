"""The offline embedded task: short arithmetic problems in GSM8K's format, generated on the fly.

Designed so a ~3M-parameter model can learn it by GRPO on a 2-core CPU in minutes, with room to
improve on both parts of the gsm8k reward:
- correctness: addition and subtraction of 1-2 digit numbers (carries and borrows make the
  two-digit ones hard for a tiny model, one-digit ones are easy);
- format: the demonstrations used to warm-start the tiny model (`Example.meta["demo"]`) use a
  format that depends on the phrasing, as a loosely instruction-tuned model would: `plain`
  questions mostly get `<think>..</think><answer>..</answer>`, `word` problems mostly a bare
  `<answer>..</answer>`, `calc` requests mostly "The answer is N." (no answer block, so no
  correctness either). Greedy decoding of the warm start therefore follows the full format on
  about a third of the prompts, while sampling still explores every format, which GRPO can
  reinforce.
Held-out problems are fixed by hashing (a, op, b), with `a+b` and `b+a` one problem: an evaluated
sum is never trained on, under any phrasing or operand order. Prompts are short on purpose: every prompt token costs the learner compute.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Iterator
from typing import Literal

from pydantic import Field

from arena_core.tasks import Example
from arena_envs.common import PromptConfig, PromptedTask

STYLES = ("plain", "word", "calc")
TEMPLATES: dict[str, dict[str, str]] = {
    "plain": {"+": "What is {a} + {b}?", "-": "What is {a} - {b}?"},
    "word": {
        "+": "{name} has {a} {things} and gets {b} more. How many now?",
        "-": "{name} has {a} {things} and gives away {b}. How many are left?",
    },
    "calc": {"+": "Calculate {a} plus {b}.", "-": "Calculate {a} minus {b}."},
}
NAMES = ("Ann", "Bob", "Eva", "Tom", "Sue", "Max", "Liz", "Sam")
THINGS = ("apples", "cards", "coins", "books", "pens", "shells")
# Warm-start demonstration format per style: (full, answer-only, no-block) probabilities.
DEMO_MIX: dict[str, tuple[float, float, float]] = {
    "plain": (0.8, 0.15, 0.05),
    "word": (0.25, 0.7, 0.05),
    "calc": (0.25, 0.05, 0.7),
}


class ArithmeticConfig(PromptConfig):
    """The `env` section for `env=arithmetic`."""

    name: str = "arithmetic"
    system_prompt: str = Field("", description="Empty: the tiny model is prompted by the question.")
    max_digits: int = Field(
        2, ge=1, le=4, description="Operands have 1..max_digits digits (digit count drawn first)."
    )
    operations: list[Literal["+", "-"]] = Field(default_factory=lambda: ["+", "-"])
    styles: list[Literal["plain", "word", "calc"]] = Field(default_factory=lambda: list(STYLES))
    eval_fraction: float = Field(
        0.1, gt=0, lt=1, description="Share of (a, op, b) problems held out for evaluation."
    )
    eval_size: int = Field(500, ge=1)


def column_trace(a: int, op: str, b: int) -> str:
    """School column arithmetic, units first: `47+38` -> `7+8=15, 4+3+1=8`.

    Each step is a one-digit fact plus a carry (or borrow), so a tiny model that learns the ~200
    facts can solve any problem, and the answer is the last step's result followed by the earlier
    steps' units digits. A bare answer must be computed in one go, which the tiny model mostly
    cannot: thinking first is what makes answers right, and GRPO can discover that.
    """
    columns = max(len(str(a)), len(str(b)))
    steps, carry = [], 0
    for i in range(columns):
        x, y = a // 10**i % 10, b // 10**i % 10
        if op == "+":
            total = x + y + carry
            steps.append(f"{x}+{y}={total}" if i == 0 else f"{x}+{y}+{carry}={total}")
            carry = total // 10
        else:
            borrow = int(x - carry < y)
            top = x - carry + 10 * borrow
            left = f"{x}-{carry}" if i else f"{x}"
            shown = f"1{left}" if borrow and i == 0 else (f"({left}+10)" if borrow else left)
            steps.append(f"{shown}-{y}={top - y}")
            carry = borrow
    return ", ".join(steps)


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


class ArithmeticTask(PromptedTask):
    """A TextTask that writes arithmetic problems; answers are `a op b = r\\n#### r`."""

    def __init__(self, cfg: ArithmeticConfig) -> None:
        super().__init__(cfg)
        self.name = cfg.name
        self.cfg = cfg

    # -- problems ----------------------------------------------------------------------------
    @staticmethod
    def canonical(a: int, op: str, b: int) -> str:
        """The problem's identity: `a+b` and its twin `b+a` are one problem, `a-b` is itself."""
        if op == "+":
            a, b = min(a, b), max(a, b)
        return f"{a}{op}{b}"

    def is_held_out(self, a: int, op: str, b: int) -> bool:
        """Whether (a, op, b) belongs to the evaluation set (stable across runs and seeds); a
        held-out `a+b` holds out `b+a` too, so evaluation never scores a trained sum."""
        return _hash(self.canonical(a, op, b)) % 10_000 < self.cfg.eval_fraction * 10_000

    def problem_key(self, example: Example) -> str:
        """TextTask (optional): one key for every phrasing and operand order of a problem."""
        meta = example.meta
        return self.canonical(meta["a"], meta["op"], meta["b"])

    def make_example(self, a: int, op: str, b: int, style: str, rng: random.Random) -> Example:
        """One problem, phrased in `style`, with its demonstration for the warm start."""
        result = a + b if op == "+" else a - b
        template = TEMPLATES[style][op]
        question = template.format(a=a, b=b, name=rng.choice(NAMES), things=rng.choice(THINGS))
        full, answer_only, _ = DEMO_MIX[style]
        draw = rng.random()
        if draw < full:
            demo = f"<think>{column_trace(a, op, b)}</think><answer>{result}</answer>"
        elif draw < full + answer_only:
            demo = f"<answer>{result}</answer>"
        else:
            demo = f"The answer is {result}."
        return Example(
            question=question,
            answer=f"{a} {op} {b} = {result}\n#### {result}",
            meta={"a": a, "op": op, "b": b, "style": style, "demo": demo},
        )

    def _operand(self, rng: random.Random) -> int:
        # Digit count first, so easy (one-digit) and hard (carrying two-digit) problems are both
        # common: groups of samples then disagree often enough to carry a learning signal.
        digits = rng.randint(1, self.cfg.max_digits)
        return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)

    def _draw(self, rng: random.Random) -> tuple[int, str, int]:
        a, b = self._operand(rng), self._operand(rng)
        op = rng.choice(self.cfg.operations)
        if op == "-" and b > a:
            a, b = b, a  # non-negative results: the answer format stays digits only
        return a, op, b

    @functools.cached_property
    def _eval(self) -> list[Example]:
        """The held-out list, drawn on first use: a task built only to be checked or priced
        (the preflight, the planner) never pays for the draw."""
        rng = random.Random(f"arithmetic-eval-{self.cfg.seed}")
        seen: set[str] = set()
        out: list[Example] = []
        limit = 1000 * self.cfg.eval_size
        for attempt in range(limit):
            problem = self._draw(rng)
            key = self.canonical(*problem)
            if key in seen or not self.is_held_out(*problem):
                continue
            seen.add(key)
            style = self.cfg.styles[len(out) % len(self.cfg.styles)]  # balanced phrasing
            out.append(self.make_example(*problem, style, rng))
            if len(out) == self.cfg.eval_size or attempt == limit - 1:
                break
        return out

    # -- the TextTask contract ---------------------------------------------------------------
    def train_examples(self, seed: int) -> Iterator[Example]:
        """Fresh problems forever; held-out (a, op, b) are skipped."""
        rng = random.Random(f"arithmetic-train-{seed}")
        while True:
            problem = self._draw(rng)
            if not self.is_held_out(*problem):
                yield self.make_example(*problem, rng.choice(self.cfg.styles), rng)

    def eval_examples(self, n: int) -> list[Example]:
        """The first `n` of the fixed held-out list (at most eval_size)."""
        return self._eval[:n]


def make_arithmetic(env_cfg: dict) -> ArithmeticTask:
    """Registered factory: the validated `env` section -> the task."""
    cfg = env_cfg if isinstance(env_cfg, ArithmeticConfig) else ArithmeticConfig(**env_cfg)
    return ArithmeticTask(cfg)

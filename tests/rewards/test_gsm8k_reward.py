"""The gsm8k reward file: every rule, checked with hand-written completions."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

FILE = Path(__file__).resolve().parents[2] / "arena_rewards" / "gsm8k.py"
spec = importlib.util.spec_from_file_location("gsm8k_reward_under_test", FILE)
gsm8k = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gsm8k)

REF = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
Q = "How many clips?"


def score(completion: str, answer: str = REF) -> tuple[float, dict[str, float]]:
    return gsm8k.reward(Q, answer, completion), gsm8k.components(Q, answer, completion)


@pytest.mark.parametrize(
    ("completion", "answer", "correct", "fmt"),
    [
        ("<think>48+24=72</think><answer>72</answer>", REF, 1, 1),  # both
        ("<think>48+24=72</think>\n<answer>\n72\n</answer>", REF, 1, 1),  # whitespace between
        ("<think>48+24=70</think><answer>70</answer>", REF, 0, 1),  # format only
        ("<answer>72</answer>", REF, 1, 0),  # correct, no think
        ("The answer is 72.", REF, 0, 0),  # no answer block: correctness 0
        ("<think>72</think> 72", REF, 0, 0),  # think without answer block
        ("<think>x</think><answer>72", REF, 0, 0),  # unclosed answer block
        ("<answer>It is 70, no, 72</answer>", REF, 1, 0),  # last number in the block
        ("<answer>72 apples, 3 left</answer>", REF, 0, 0),  # last number is 3
        ("<answer>70</answer> then <answer>72</answer>", REF, 1, 0),  # last block counts
        ("<answer>72</answer> and 5", REF, 1, 0),  # numbers after the block do not count
        ("<think>t</think><answer>1,234</answer>", "#### 1234", 1, 1),  # commas, completion
        ("<answer>1234</answer>", "#### 1,234", 1, 0),  # commas, reference
        ("<answer>$5</answer>", "#### $5", 1, 0),  # dollar signs both sides
        ("<answer>$1,000.00</answer>", "#### 1000", 1, 0),  # all together, 1000.00 == 1000
        ("<answer>72.0</answer>", REF, 1, 0),  # decimals compare by value
        ("<answer>72.5</answer>", REF, 0, 0),
        ("<answer>-3</answer>", "#### -3", 1, 0),  # negatives
        ("<answer>3</answer>", "#### -3", 0, 0),
        ("<answer>0.5</answer>", "#### .5", 0, 0),  # '.5' has no digit before the point
        ("<answer>42</answer>", "42", 1, 0),  # reference without ####: the number itself
        ("<answer>7</answer>", "no number here", 0, 0),  # unreadable reference
        ("<think></think><answer>72</answer>", REF, 1, 0),  # empty think is not the format
        ("<think>a</think><answer> </answer>", REF, 0, 0),  # empty answer block
        ("", REF, 0, 0),
    ],
)
def test_rules(completion: str, answer: str, correct: int, fmt: int) -> None:
    total, parts = score(completion, answer)
    assert parts == {"correctness": float(correct), "format": float(fmt)}
    assert total == correct + fmt
    assert isinstance(total, float)


def test_components_sum_to_reward_and_max_is_two() -> None:
    total, parts = score("<think>ok</think><answer>72</answer>")
    assert total == sum(parts.values()) == 2.0


def test_file_runs_standalone_without_arena() -> None:
    """The sandbox may load it in a bare interpreter: no arena_core import allowed."""
    code = (
        "import importlib.util,sys;"
        f"s=importlib.util.spec_from_file_location('r',{str(FILE)!r});m=importlib.util.module_from_spec(s);"
        "s.loader.exec_module(m);"
        "assert not any(k.startswith('arena') for k in sys.modules);"
        "print(m.reward('q','#### 2','<think>1+1</think><answer>2</answer>'))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "2.0"


def test_plugin_registers_the_file() -> None:
    from arena_rewards import plugin

    seen = {}
    plugin.register_rewards(lambda name, target, description="": seen.update({name: target}))
    assert Path(seen["gsm8k"]) == FILE

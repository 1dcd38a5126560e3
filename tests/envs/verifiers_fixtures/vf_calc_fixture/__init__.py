"""A classic verifiers ToolEnv from a plain function (test fixture)."""

import verifiers as vf
from datasets import Dataset

CALLS = []


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first integer
        b: the second integer
    """
    return a + b


def load_environment():
    rows = [{"question": f"Use the add tool: {i} + 7", "answer": str(i + 7)} for i in range(30)]

    def answered(completion, answer) -> float:
        return 1.0 if answer in (completion[-1].content or "") else 0.0

    def called_add(completion) -> float:
        return float(sum(len(m.tool_calls or []) for m in completion if m.role == "assistant"))

    return vf.ToolEnv(
        tools=[add],
        dataset=Dataset.from_list(rows[:20]),
        eval_dataset=Dataset.from_list(rows[20:]),
        rubric=vf.Rubric(funcs=[answered, called_add], weights=[1.0, 0.0]),
        max_turns=3,
    )

"""A classic verifiers SingleTurnEnv (test fixture): add two numbers; rubric of two functions."""

import verifiers as vf
from datasets import Dataset


def _rows(start: int, n: int) -> list[dict]:
    return [
        {"question": f"What is {i} + {i + 1}?", "answer": str(2 * i + 1), "info": {"i": i}}
        for i in range(start, start + n)
    ]


def load_environment(
    n: int = 40,
    raise_on: str = "",
    no_eval: bool = False,
    column: str = "question",
    group: bool = False,
):
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_answer(completion, answer) -> float:
        got = parser.parse_answer(completion) or ""
        if raise_on and raise_on in got:
            raise ValueError(f"cannot score {got!r}")
        return 1.0 if got.strip() == answer else 0.0

    def uses_info(info, prompt) -> float:  # only the arguments it names
        return 1.0 if isinstance(info, dict) and "i" in info and prompt else 0.0

    rows = _rows(0, n)
    if column != "question":
        rows = [{column: r["question"], "answer": r["answer"]} for r in rows]

    def distinct(completions) -> list[float]:  # a group function: unique within its group
        texts = [c[-1].content for c in completions]
        return [1.0 if texts.count(t) == 1 else 0.0 for t in texts]

    funcs, weights = [correct_answer, uses_info], [1.0, 0.25]
    if group:
        funcs, weights = [*funcs, distinct], [*weights, 0.5]
    rubric = vf.Rubric(funcs=funcs, weights=weights, parser=parser)
    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(rows),
        eval_dataset=None if no_eval else Dataset.from_list(_rows(1000, 10)),
        system_prompt="Answer inside <answer></answer>.",
        parser=parser,
        rubric=rubric,
    )

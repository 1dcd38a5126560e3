"""vf-arith: a verifiers environment (classic API) of short sums, for Arena's learning check.

`load_environment(num_train=2000, num_eval=200, min_terms=2, max_terms=3, seed=0)`: questions
"What is 3 + 5 + 2?" with the answer in <answer></answer>; the rubric's `correct_answer` (weight
1) is the exact sum, `format_ok` (weight 0: a metric) says whether an answer block was given.
One worked exchange (`few_shot`) shows the format, so a small instruct model answers in it from
the start. Training and eval rows come from different random streams, and the eval questions are
distinct.
"""

from __future__ import annotations

import random

import verifiers as vf
from datasets import Dataset

SYSTEM = "Add the numbers. Write only the final answer inside <answer> </answer> tags."


def _row(rng: random.Random, min_terms: int, max_terms: int) -> dict:
    terms = [rng.randint(0, 9) for _ in range(rng.randint(min_terms, max_terms))]
    return {"question": f"What is {' + '.join(map(str, terms))}?", "answer": str(sum(terms))}


def load_environment(
    num_train: int = 2000,
    num_eval: int = 200,
    min_terms: int = 2,
    max_terms: int = 3,
    seed: int = 0,
) -> vf.Environment:
    rng = random.Random(f"eval:{seed}")
    eval_rows, seen = [], set()
    while len(eval_rows) < num_eval:
        row = _row(rng, min_terms, max_terms)
        if row["question"] not in seen:
            seen.add(row["question"])
            eval_rows.append(row)
    rng = random.Random(f"train:{seed}")
    train_rows = [_row(rng, min_terms, max_terms) for _ in range(num_train)]
    parser = vf.XMLParser(["answer"], answer_field="answer")

    def correct_answer(completion, answer) -> float:
        got = parser.parse_answer(completion) or ""
        return 1.0 if got.strip() == answer else 0.0

    def format_ok(completion) -> float:
        return 1.0 if (parser.parse_answer(completion) or "").strip() else 0.0

    return vf.SingleTurnEnv(
        dataset=Dataset.from_list(train_rows),
        eval_dataset=Dataset.from_list(eval_rows),
        system_prompt=SYSTEM,
        few_shot=[
            {"role": "user", "content": "What is 4 + 1 + 3?"},
            {"role": "assistant", "content": "<answer>8</answer>"},
        ],
        parser=parser,
        rubric=vf.Rubric(funcs=[correct_answer, format_ok], weights=[1.0, 0.0], parser=parser),
    )

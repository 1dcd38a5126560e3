"""The inputs `arena validate reward` feeds a reward: each class probes one way training breaks.

Gold completions (the reference answer itself, and in common answer formats) must outscore the
garbage classes (empty, whitespace, unicode noise, perturbed answers, right format with a wrong
answer), or the policy gets no signal toward correct answers. Long inputs come last: they expose
catastrophic regex backtracking as timeouts.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Offline rows (GSM8K-style final answers) used when no --dataset is given.
DEFAULT_ROWS: list[tuple[str, str]] = [
    (
        "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips "
        "to her friends in May. How many clips did Natalia sell altogether in April and May?",
        "Natalia sold 48/2 = 24 clips in May.\nNatalia sold 48+24 = 72 clips altogether.\n#### 72",
    ),
    ("Weng earns $12 an hour for babysitting. She did 50 minutes. How much did she earn?", "10"),
    ("What is 17 + 25?", "42"),
    ("A train travels 60 km in 1.5 hours. What is its speed in km per hour?", "40"),
]

GOLD_FORMATS = ("{a}", "#### {a}", "The answer is {a}.", "\\boxed{{{a}}}", "<answer>{a}</answer>")
UNICODE_NOISE = "答案是 ∑ λ→∞ café naïve 🤖🚀 \u200b\u202e עברית Ω≈ç√ ∫ ﬁ"
LONG_CHARS = 20_000

GOLD = "gold"
WRONG = "wrong_answer"
EMPTY = "empty"
WHITESPACE = "whitespace"
UNICODE = "unicode"
TRUNCATED = "truncated"
PERTURBED = "perturbed"
LONG = "long"
CLASSES = (GOLD, WRONG, EMPTY, WHITESPACE, UNICODE, TRUNCATED, PERTURBED, LONG)
GARBAGE = (WRONG, EMPTY, WHITESPACE, UNICODE, PERTURBED)  # must score below gold


@dataclass(frozen=True)
class Probe:
    """One reward call: its input class, the dataset row it came from, and its arguments."""

    cls: str
    row: int
    question: str
    answer: str
    completion: str

    @property
    def item(self) -> tuple[str, str, str]:
        return (self.question, self.answer, self.completion)


def final_answer(answer: str) -> str:
    """The short answer: after GSM8K's `####` when present, else the whole stripped answer."""
    return answer.split("####")[-1].strip()


def wrong_answer(final: str) -> str:
    """A plausible but wrong answer of the same shape."""
    try:
        number = float(final.replace(",", ""))
    except ValueError:
        return "not " + final if final else "something else"
    wrong = number * 2 + 3
    return str(int(wrong)) if wrong == int(wrong) else f"{wrong:g}"


def perturb(text: str) -> str:
    """Every digit shifted by one (changes every number) or, without digits, words reversed."""
    if re.search(r"\d", text):
        return re.sub(r"\d", lambda m: str((int(m.group()) + 1) % 10), text)
    words = text.split()
    return " ".join(reversed(words)) + " (perturbed)" if words else "perturbed"


def long_inputs(answer: str) -> list[str]:
    """Inputs of ~20k characters shaped to trigger nested-quantifier regexes."""
    gold = final_answer(answer)
    return [
        ("Let me think step by step. " * (LONG_CHARS // 27))[:LONG_CHARS] + f" #### {gold}",
        "a" * LONG_CHARS + "!",
        "1" * LONG_CHARS + "x",
        f"{gold} " + " " * LONG_CHARS + "!",
    ]


def build_probes(rows: list[tuple[str, ...]]) -> list[Probe]:
    """Every class for every row; long inputs only for the first row, and last.

    A row is (question, answer) or (question, answer, gold completion): an environment's own
    gold completion (TextTask.gold_completion) is scored as gold next to the generic formats.
    """
    probes: list[Probe] = []
    for r, row in enumerate(rows):
        question, answer = row[0], row[1]
        final = final_answer(answer)
        golds = [*row[2:3], answer] + [f.format(a=final) for f in GOLD_FORMATS[1:]]
        if final != answer.strip():
            golds.append(final)
        probes += [Probe(GOLD, r, question, answer, c) for c in dict.fromkeys(golds)]
        wrong = wrong_answer(final)
        probes += [Probe(WRONG, r, question, answer, f.format(a=wrong)) for f in GOLD_FORMATS]
        probes += [
            Probe(EMPTY, r, question, answer, ""),
            Probe(WHITESPACE, r, question, answer, " \n\t  \n"),
            Probe(UNICODE, r, question, answer, UNICODE_NOISE),
            Probe(TRUNCATED, r, question, answer, answer[: max(1, len(answer) // 2)]),
            Probe(PERTURBED, r, question, answer, perturb(answer)),
        ]
    if rows:
        question, answer = rows[0][0], rows[0][1]
        probes += [Probe(LONG, 0, question, answer, c) for c in long_inputs(answer)]
    return probes

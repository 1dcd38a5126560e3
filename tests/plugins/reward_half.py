"""A reward file for tests: 1.0 when the answer appears in the completion, else 0.0."""


def reward(question: str, answer: str, completion: str) -> float:
    return 1.0 if answer and answer in completion else 0.0

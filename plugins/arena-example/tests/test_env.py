"""Behaviour specific to reverse_words, beyond what the conformance suites check."""

from __future__ import annotations

import itertools

import pytest
from arena_example.env import ReverseWordsConfig, ReverseWordsTask
from pydantic import ValidationError


def test_answers_are_the_reversed_words() -> None:
    task = ReverseWordsTask({"min_words": 3, "max_words": 3})
    for ex in itertools.islice(task.train_examples(7), 20):
        words = ex.question.split(": ", 1)[1].split()
        assert len(words) == 3 and ex.answer.split() == words[::-1]


def test_min_above_max_is_a_config_error_with_the_fix() -> None:
    with pytest.raises(ValidationError, match="lower min_words or raise max_words"):
        ReverseWordsConfig(min_words=5, max_words=2)


def test_asking_for_more_held_out_examples_than_exist_says_what_to_change() -> None:
    task = ReverseWordsTask({"min_words": 1, "max_words": 1, "eval_fraction": 0.05})
    with pytest.raises(ValueError, match="raise max_words or eval_fraction"):
        task.eval_examples(500)


def test_countdown_answers_hit_their_targets_and_the_reward_checks_the_numbers() -> None:
    from arena_example.countdown import CountdownTask
    from arena_example.reward_countdown import reward

    task = CountdownTask({"numbers": 4})
    for ex in itertools.islice(task.train_examples(3), 20):
        assert reward(ex.question, ex.answer, task.gold_completion(ex)) == 1.0
    assert reward("Numbers: 2 3 4. Target: 12.", "", "<answer>3 * 4</answer>") == 1.0
    assert reward("Numbers: 2 3 4. Target: 16.", "", "<answer>4 * 4</answer>") == 0.0  # 4 twice
    assert reward("Numbers: 2 3 4. Target: 12.", "", "<answer>2 + 3</answer>") == 0.1
    assert reward("Numbers: 2 3 4. Target: 12.", "", "<answer>__import__('os')</answer>") == 0.0

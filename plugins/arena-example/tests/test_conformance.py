"""arena-example's own tests: Arena's conformance suites, subclassed.

Run with `pytest plugins/arena-example/tests` after `pip install -e plugins/arena-example`. The
suites look the plugin up through the installed entry point, so these tests also prove that the
packaging works.
"""

from __future__ import annotations

from arena_example.env import ReverseWordsConfig, ReverseWordsTask
from arena_example.plugin import REWARD_FILE

from arena_core.testing import EnvConformance, RewardConformance


class TestReverseWordsEnv(EnvConformance):
    env_name = "reverse_words"
    config = {"min_words": 2, "max_words": 5}


class TestReverseWordsFactory(EnvConformance):
    """The same checks on the class directly, as an author would before registering it."""

    factory = ReverseWordsTask
    schema = ReverseWordsConfig
    config = {"eval_fraction": 0.2}


class TestReverseWordsReward(RewardConformance):
    reward = "reverse_words_match"
    samples = [
        (
            "Reverse the order of these words: apple river stone",
            "stone river apple",
            "<answer>stone river apple</answer>",
            "<answer>apple river stone</answer>",
        ),
        (
            "Reverse the order of these words: green eagle",
            "eagle green",
            "eagle green",
            "I cannot do that.",
        ),
        (
            "Reverse the order of these words: piano lemon tiger",
            "tiger lemon piano",
            "<answer>tiger lemon pian</answer>",  # two of three in place beats none
            "<answer>piano tiger lemon</answer>",
        ),
    ]


class TestRewardFileByPath(RewardConformance):
    """A reward file is checked the same way when given by path (`reward=path/to/file.py`)."""

    reward = str(REWARD_FILE)
    samples = TestReverseWordsReward.samples[:1]


class TestCountdownEnv(EnvConformance):
    env_name = "countdown"
    config = {"numbers": 3}


class TestCountdownReward(RewardConformance):
    reward = "countdown_match"
    samples = [
        (
            "Numbers: 2 3 4. Target: 10.",
            "2 + 4 * 2",
            "<answer>2 * 3 + 4</answer>",
            "<answer>2 * 3</answer>",
        ),
        (
            "Numbers: 1 5 9. Target: 13.",
            "9 + 5 - 1",
            "<answer>9 + 5 - 1</answer>",
            "<answer>9 + 9 - 5</answer>",
        ),
    ]

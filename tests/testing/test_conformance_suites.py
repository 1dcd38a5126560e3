"""The conformance suites catch what they promise to catch, and pass on the built-ins.

Broken plugins are run through the suites in a nested pytest session: each defect must fail
exactly the check that names it, while the other checks still pass.
"""

from __future__ import annotations

from pathlib import Path

from arena_core.testing import AlgorithmConformance, EnvConformance, RewardConformance
from tests.core.conftest import run_nested

BROKEN_ENV = '''
import itertools, random
from pydantic import BaseModel
from arena_core.tasks import Example
from arena_core.testing import EnvConformance


class Loose(BaseModel):  # no extra="forbid"
    size: int = 3


class Leaky:
    """Ignores its seed's determinism, leaks eval examples and returns bad messages."""

    name = "leaky"
    reward = "no_such_reward"

    def __init__(self, section):
        self.calls = 0

    def train_examples(self, seed):
        self.calls += 1
        rng = random.Random(seed + self.calls)  # a different stream on every call
        while True:
            n = rng.randint(0, 3)
            yield Example(question=f"q{n}", answer=str(n))

    def eval_examples(self, n):
        return [Example(question=f"q{i % 4}", answer=str(i % 4)) for i in range(n)]

    def messages(self, example):
        return [{"role": "human", "content": example.question}]


class TestLeaky(EnvConformance):
    factory = Leaky
    schema = Loose


class NotATask:
    def __init__(self, section):
        pass


class TestNotATask(EnvConformance):
    factory = NotATask
    require_schema = False
'''

BROKEN_REWARD = """
from pathlib import Path
from arena_core.testing import RewardConformance

HERE = Path(__file__).parent
(HERE / "upside_down.py").write_text(
    "def reward(question, answer, completion):\\n"
    "    if not completion:\\n"
    "        raise ValueError('empty')\\n"
    "    return 0.0 if answer in completion else 1.0\\n"
)
(HERE / "two_args.py").write_text("def reward(answer, completion):\\n    return 1\\n")


class TestUpsideDown(RewardConformance):
    reward = str(HERE / "upside_down.py")
    samples = [("2+2?", "4", "4", "5")]


class TestTwoArgs(RewardConformance):
    reward = str(HERE / "two_args.py")
    samples = [("2+2?", "4", "4", "5")]
"""

BROKEN_ALGORITHM = '''
import torch
from pydantic import BaseModel, ConfigDict
from arena_core.testing import AlgorithmConformance


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lr: float = 1e-3


class RawRewards:
    """Uses raw rewards as advantages (no baseline) and a loss detached from logp."""

    group_size, lr, max_grad_norm, weight_decay = 4, 1e-3, None, 0.0
    loss_agg_mode, beta, num_iterations = "token-mean", 0.0, 1

    def __init__(self, config):
        self.config = config

    def advantages(self, rewards):
        return rewards.clone()

    def token_loss(self, batch):
        return -(batch.advantages * batch.old_logp), {}


class TestRawRewards(AlgorithmConformance):
    algorithm_class = RawRewards
    schema = Config
'''


def test_env_suite_catches_each_defect(tmp_path: Path) -> None:
    outcomes = run_nested(tmp_path, BROKEN_ENV)
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    assert failed == {
        "TestLeaky::test_schema_forbids_extra_keys",
        "TestLeaky::test_default_reward_resolves",
        "TestLeaky::test_train_examples_deterministic_per_seed",
        "TestLeaky::test_eval_examples_held_out",
        "TestLeaky::test_messages_are_chat_messages",
        "TestLeaky::test_default_reward_scores_gold_highest",  # its reward does not exist
        "TestNotATask::test_builds_a_task",
        # the text-task checks on a non-task fail too (AttributeError), which is right
        "TestNotATask::test_default_reward_resolves",
        "TestNotATask::test_train_examples_are_examples",
        "TestNotATask::test_train_examples_deterministic_per_seed",
        "TestNotATask::test_eval_examples_held_out",
        "TestNotATask::test_messages_are_chat_messages",
        "TestNotATask::test_messages_render_through_the_chat_template",
        "TestNotATask::test_default_reward_scores_gold_highest",
    }, outcomes
    assert outcomes["TestLeaky::test_train_examples_are_examples"] == "passed"
    assert outcomes["TestNotATask::test_schema_forbids_extra_keys"] == "skipped"


def test_reward_suite_catches_each_defect(tmp_path: Path) -> None:
    outcomes = run_nested(tmp_path, BROKEN_REWARD)
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    assert failed == {
        "TestUpsideDown::test_good_beats_bad",
        "TestUpsideDown::test_odd_inputs",
        "TestTwoArgs::test_signature",
        "TestTwoArgs::test_returns_finite_float",  # returns an int... and it is called with 3 args
        "TestTwoArgs::test_good_beats_bad",
        "TestTwoArgs::test_deterministic",
        "TestTwoArgs::test_odd_inputs",
    }, outcomes
    assert outcomes["TestUpsideDown::test_deterministic"] == "passed"


def test_algorithm_suite_catches_each_defect(tmp_path: Path) -> None:
    outcomes = run_nested(tmp_path, BROKEN_ALGORITHM)
    failed = {name for name, outcome in outcomes.items() if outcome == "failed"}
    assert failed == {
        "TestRawRewards::test_advantages_zero_mean_per_group",
        "TestRawRewards::test_advantages_zero_for_constant_rewards",
        "TestRawRewards::test_token_loss_finite_and_differentiable",
    }, outcomes
    assert outcomes["TestRawRewards::test_has_learner_interface"] == "passed"


# -- the built-ins pass their own suites ---------------------------------------------------------
class TestGRPOConformance(AlgorithmConformance):
    algorithm_name = "grpo"
    config = {"group_size": 4}


class TestDrGRPOConformance(AlgorithmConformance):
    algorithm_name = "grpo"
    config = {"scale_rewards": "none", "loss_agg_mode": "seq-mean-token-sum-norm", "beta": 0.0}


class TestCISPOConformance(AlgorithmConformance):
    algorithm_name = "cispo"


class TestGSPOConformance(AlgorithmConformance):
    algorithm_name = "gspo"


class TestGsm8kRewardConformance(RewardConformance):
    reward = "gsm8k"
    samples = [
        (
            "Tom has 3 apples and buys 4 more. How many apples does he have?",
            "3 + 4 = 7\n#### 7",
            "<think>3 + 4 = 7</think><answer>7</answer>",
            "<think>3 + 4 = 8</think><answer>8</answer>",
        ),
        ("What is 10 - 4?", "#### 6", "<answer>6</answer>", "6"),
    ]


class TestArithmeticEnvConformance(EnvConformance):
    env_name = "arithmetic"
    config = {"eval_size": 20}

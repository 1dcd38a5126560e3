"""RLOO, REINFORCE++ and the advantage options of GRPO/CISPO (batch-std scaling, DAPO's overlong
shaping and truncated-completion masking) on fixed batches: the plugins' values and gradients, and
what the group collector makes of them, each against numbers worked out by hand."""

from __future__ import annotations

import statistics

import pytest
import torch
import yaml
from pydantic import ValidationError

from arena_algorithms import plugin
from arena_algorithms.cispo import CISPO
from arena_algorithms.grpo import GRPO, GRPOConfig
from arena_algorithms.reinforce_pp import ReinforcePP, ReinforcePPConfig
from arena_algorithms.rloo import RLOO, RLOOConfig
from arena_core.engines.base import Completion, SamplingParams
from arena_core.learn.algorithm import Algorithm, TokenBatch
from arena_core.llm_rl.groups import GroupCollector
from arena_core.testing.conformance import AlgorithmConformance

CONF = plugin.__file__.rsplit("/", 1)[0] + "/conf/algo"


class TestRLOOConformance(AlgorithmConformance):
    algorithm_name = "rloo"


class TestReinforcePPConformance(AlgorithmConformance):
    algorithm_name = "reinforce_pp"  # the default -baseline variant is group-centred


def test_registered_with_schemas_and_yaml_defaults() -> None:
    seen = {}
    plugin.register_algorithms(
        lambda name, obj, schema=None, description="": seen.update({name: (obj, schema)})
    )
    assert seen["rloo"] == (RLOO, RLOOConfig)
    assert seen["reinforce_pp"] == (ReinforcePP, ReinforcePPConfig)
    for name, schema in (("rloo", RLOOConfig), ("reinforce_pp", ReinforcePPConfig)):
        with open(f"{CONF}/{name}.yaml") as f:
            cfg = schema(**yaml.safe_load(f))
        assert cfg.model_dump() == schema().model_dump()  # the YAML and the schema agree
        assert isinstance(seen[name][0](cfg), Algorithm)


def test_rloo_advantages_and_gradient_by_hand() -> None:
    algo = RLOO({"group_size": 3})
    adv = algo.advantages(torch.tensor([[3.0, 1.0, 2.0]]))
    assert adv[0].tolist() == pytest.approx([1.5, -1.5, 0.0])  # r_i - mean of the other two
    # the loss is GRPO's PPO-clip surrogate: at ratio 1 the gradient of token t is -A_t
    old = torch.tensor([-1.0, -2.0, -0.5])
    logp = old.clone().requires_grad_(True)
    loss, stats = algo.token_loss(TokenBatch(logp, old, old, torch.ones(3), adv[0]))
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-1.5, 1.5, 0.0])
    assert stats["clip_frac"].tolist() == [0.0, 0.0, 0.0]
    # group-std scaling divides by the group's sample std (1.0 here)
    scaled = RLOO({"scale_rewards": "group", "adv_eps": 1e-8}).advantages(
        torch.tensor([[3.0, 1.0, 2.0]])
    )
    assert scaled[0].tolist() == pytest.approx([1.5, -1.5, 0.0])


def test_reinforce_pp_baselines() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0]])
    assert ReinforcePP().advantages(rewards)[0].tolist() == [0.5, -0.5, -0.5, 0.5]
    assert ReinforcePP({"baseline": "none"}).advantages(rewards)[0].tolist() == rewards[0].tolist()
    with pytest.raises(ValidationError, match="batch"):
        ReinforcePPConfig(scale_rewards="group")  # its normalisation is always the batch's


def test_scale_rewards_rejects_what_it_does_not_know() -> None:
    assert GRPOConfig().scale_rewards == "group"
    for wrong in ("batchstd", "std"):  # the error lists 'group', 'batch' and 'none'
        with pytest.raises(ValidationError, match="'group', 'batch' or 'none'"):
            GRPOConfig(scale_rewards=wrong)
    with pytest.raises(ValidationError, match="overlong_buffer"):
        GRPOConfig(overlong_buffer=-1)


# -- the collector: fixed completions, fixed rewards ---------------------------------------------
class _Task:
    name, reward = "t", "r"

    def train_examples(self, seed):
        i = 0
        while True:
            yield type("E", (), {"question": f"q{i}", "answer": str(i)})()
            i += 1


class _Backend:
    """Group k's completion j has `lengths[j]` tokens, reward text `rewards[k][j]`; a completion
    of max_new_tokens tokens ends "length" (truncated), shorter ones "stop"."""

    name, policy_version = "fixed", 0

    def __init__(self, rewards: list[list[float]], lengths: list[int]) -> None:
        self.rewards, self.lengths, self.calls = rewards, lengths, 0

    def generate(self, prompts, params):
        g = len(self.lengths)
        out = []
        for i, p in enumerate(prompts):
            k, j = divmod(i, g)
            n = self.lengths[j]
            reward = self.rewards[(self.calls + k) % len(self.rewards)][j]
            reason = "length" if n >= params.max_new_tokens else "stop"
            out.append(Completion(p, [5] * n, [-0.5] * n, str(reward), reason))
        self.calls += len(prompts) // g
        return out


def _scorer(items):
    return [float(c) for _, _, c in items], ["ok"] * len(items)


_scorer.score_with_components = lambda items: (*_scorer(items), {})


def _collect(algo, rewards, lengths, n_groups=2, max_new_tokens=10):
    collector = GroupCollector(
        _Task(),
        lambda ex: [7, int(ex.answer)],
        _Backend(rewards, lengths),
        _scorer,
        algo,
        SamplingParams(max_new_tokens=max_new_tokens),
        seed=0,
    )
    return collector.collect(n_groups, step=0)


@pytest.mark.parametrize("cls", [GRPO, CISPO])
def test_batch_std_scales_by_the_steps_reward_std(cls) -> None:
    rewards = [[1.0, 0.0, 0.0, 1.0], [2.0, 0.0, 2.0, 0.0]]
    batch = _collect(cls({"group_size": 4, "scale_rewards": "batch"}), rewards, [3, 3, 3, 3])
    std = statistics.stdev([1.0, 0.0, 0.0, 1.0, 2.0, 0.0, 2.0, 0.0])  # the whole step's rewards
    centred = [0.5, -0.5, -0.5, 0.5, 1.0, -1.0, 1.0, -1.0]
    got = [s.advantage for s in batch.samples]
    assert got == pytest.approx([a / (std + 1e-4) for a in centred], rel=1e-5)
    # group std instead gives both groups unit-scale advantages, whatever their reward range
    grouped = _collect(cls({"group_size": 4}), rewards, [3, 3, 3, 3])
    assert [abs(s.advantage) for s in grouped.samples] == pytest.approx([0.866] * 8, abs=1e-3)


def test_overlong_shaping_changes_the_rewards_before_advantages() -> None:
    # max_new_tokens 10, buffer 4: lengths 4, 7, 8, 10 lose 0, 0.25, 0.5, 1 (times 0.5)
    algo = GRPO({"group_size": 4, "scale_rewards": "none", "overlong_buffer": 4,
                 "overlong_penalty": 0.5})  # fmt: skip
    batch = _collect(algo, [[1.0, 1.0, 1.0, 1.0]], [4, 7, 8, 10], n_groups=1)
    pen = [0.0, -0.125, -0.25, -0.5]
    assert batch.components["overlong"] == pytest.approx(pen)  # logged as reward/overlong
    shaped = [1.0 + p for p in pen]  # equal task rewards: the penalty alone now separates them
    mean = statistics.fmean(shaped)
    assert [s.advantage for s in batch.samples] == pytest.approx([r - mean for r in shaped])
    assert batch.group_rewards == pytest.approx(shaped)
    assert batch.rewards == [1.0] * 4  # reward/mean stays the task's reward


def test_mask_truncated_keeps_truncated_completions_out_of_the_loss() -> None:
    algo = CISPO({"group_size": 4, "scale_rewards": "none", "mask_truncated": True})
    # completion 3 hits max_new_tokens (finish_reason "length"); it still counts in the mean
    batch = _collect(algo, [[1.0, 0.0, 0.0, 1.0]], [4, 5, 6, 10], n_groups=1)
    assert [len(s.completion_ids) for s in batch.samples] == [4, 5, 6]
    assert [s.advantage for s in batch.samples] == pytest.approx([0.5, -0.5, -0.5])
    assert batch.algo_metrics == {"samples/masked_truncated": 1.0}
    off = _collect(CISPO({"group_size": 4}), [[1.0, 0.0, 0.0, 1.0]], [4, 5, 6, 10], n_groups=1)
    assert len(off.samples) == 4 and off.algo_metrics == {}


def test_a_group_left_without_trainable_completions_is_refilled() -> None:
    algo = GRPO({"group_size": 2, "mask_truncated": True})
    # every first group is truncated throughout; the refill's groups are not
    backend = _Backend([[1.0, 0.0]], [10, 10])
    collector = GroupCollector(
        _Task(), lambda ex: [7], backend, _scorer, algo, SamplingParams(max_new_tokens=10), seed=0
    )
    batch = collector.collect(1, step=0)
    assert batch.samples == [] and batch.groups_dropped == batch.groups_sampled
    assert batch.algo_metrics["samples/masked_truncated"] == 2 * batch.groups_sampled


def test_reinforce_pp_without_baseline_still_drops_flat_groups() -> None:
    # an all-ones group would get scalar 1 everywhere: equal rewards carry no signal either way
    batch = _collect(
        ReinforcePP({"group_size": 2, "baseline": "none"}), [[1.0, 1.0], [1.0, 0.0]], [3, 3], 1
    )
    assert batch.groups_kept == 1 and batch.groups_dropped >= 1
    assert [s.advantage for s in batch.samples] == [1.0, 0.0]  # the raw rewards


def test_batch_std_with_masking_uses_every_reward_of_the_kept_groups() -> None:
    """The trained completions can all share one reward (the truncated one differed): the std
    is over the group's rewards the centring used, so the advantages stay on the reward's scale
    instead of dividing by ~0."""
    algo = GRPO({"group_size": 4, "scale_rewards": "batch", "mask_truncated": True})
    batch = _collect(algo, [[1.0, 0.0, 0.0, 0.0]], [10, 4, 5, 6], n_groups=1)
    std = statistics.stdev([1.0, 0.0, 0.0, 0.0])  # 0.5
    assert [s.advantage for s in batch.samples] == pytest.approx([-0.25 / (std + 1e-4)] * 3)


def test_configs_compose_from_the_quickstart_and_an_oversized_buffer_is_refused() -> None:
    """`arena-run +experiment=quickstart algo=NAME` composes (the preset's group_size, lr, beta,
    max_grad_norm are accepted); a buffer that does not fit max_new_tokens is refused up front."""
    from arena_core.config import compose_run_config
    from arena_core.errors import ConfigError

    for name in ("rloo", "reinforce_pp"):
        cfg = compose_run_config(["+experiment=quickstart", f"algo={name}"])
        assert cfg["algo"]["name"] == name and cfg["algo"]["lr"] == 1e-4
    cfg = compose_run_config(["+experiment=quickstart", "algo.scale_rewards=batch"])
    assert cfg["algo"]["scale_rewards"] == "batch"
    with pytest.raises(ConfigError) as caught:
        compose_run_config(["+experiment=quickstart", "algo.overlong_buffer=48"])
    assert any("algo.overlong_buffer=48 must be smaller than" in p for p in caught.value.problems)

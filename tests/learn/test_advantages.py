"""The estimators of arena_core.learn.advantages against numbers worked out by hand: RLOO's
leave-one-out baseline, batch-std scaling, DAPO's overlong penalty, REINFORCE++'s KL-in-reward
returns and global normalisation, and the learner feeding REINFORCE++ its per-token advantages."""

from __future__ import annotations

import statistics

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_algorithms.reinforce_pp import ReinforcePP
from arena_core.learn.advantages import (
    batch_std_scale,
    kl_returns,
    overlong_penalty,
    rloo_advantages,
    token_normalise,
)
from arena_core.learn.learner import Learner, completion_logprobs
from arena_core.learn.packing import Sample, pack


def test_rloo_subtracts_the_mean_of_the_others() -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 2.0, 2.0]])
    adv = rloo_advantages(rewards)
    # r=1: the others {0, 0, 1} average 1/3; r=0: the others {1, 0, 1} average 2/3
    assert adv[0].tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    # 3 - (1+2+2)/3, 1 - (3+2+2)/3, 2 - (3+1+2)/3
    assert adv[1].tolist() == pytest.approx([4 / 3, -4 / 3, 0.0, 0.0])
    with pytest.raises(ValueError, match="group_size >= 2"):
        rloo_advantages(torch.tensor([[1.0], [0.0]]))


def test_batch_std_divides_by_the_std_of_every_reward_of_the_step() -> None:
    adv = torch.tensor([0.5, -0.5, 1.0, -1.0])  # two groups, centred on their own means
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.0])
    std = statistics.stdev([1.0, 0.0, 2.0, 0.0])  # 0.9574: one number for the whole batch
    out = batch_std_scale(adv, rewards, eps=1e-4)
    assert out.tolist() == pytest.approx([x / (std + 1e-4) for x in adv.tolist()], rel=1e-6)


def test_overlong_penalty_is_dapos_soft_punishment() -> None:
    # L_max 10, L_cache 4: free up to 6 tokens, linear inside (6, 10], -1 at and past the limit
    lengths = torch.tensor([3, 6, 7, 8, 9, 10, 12])
    pen = overlong_penalty(lengths, max_len=10, buffer=4)
    assert pen.tolist() == pytest.approx([0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0])
    assert overlong_penalty(lengths, 10, 4, factor=0.5).tolist() == pytest.approx(
        [0.0, 0.0, -0.125, -0.25, -0.375, -0.5, -0.5]
    )
    with pytest.raises(ValueError, match="algo.overlong_buffer=10 must be between 1 and"):
        overlong_penalty(lengths, max_len=10, buffer=10)


def _two_sequences() -> tuple[torch.Tensor, list[int], torch.Tensor, torch.Tensor]:
    lengths = [3, 2]
    scalar = torch.tensor([1.0, 1.0, 1.0, -0.5, -0.5])  # the sequence scalar, broadcast
    behaviour = torch.tensor([-1.0, -2.0, -0.5, -1.5, -1.0])
    ref = torch.tensor([-1.2, -1.9, -0.8, -2.0, -1.0])  # log ratios 0.2, -0.1, 0.3 | 0.5, 0.0
    return scalar, lengths, behaviour, ref


def test_kl_returns_by_hand() -> None:
    scalar, lengths, behaviour, ref = _two_sequences()
    # beta 0.1, k1: per-token rewards -0.02, 0.01, -0.03 + 1 | -0.05, 0.0 - 0.5, summed to go
    got = kl_returns(scalar, lengths, behaviour, ref, beta=0.1, estimator="k1")
    assert got.tolist() == pytest.approx([0.96, 0.98, 0.97, -0.55, -0.5], abs=1e-6)
    # no reference (beta 0): every token carries its sequence's reward
    plain = kl_returns(scalar, lengths, behaviour, None, beta=0.0)
    assert plain.tolist() == pytest.approx(scalar.tolist())
    # k3 is non-negative: exp(-x) + x - 1 of the log ratio x
    k3 = kl_returns(torch.zeros(5), lengths, behaviour, ref, beta=1.0, estimator="k3")
    per_tok = [-(torch.exp(torch.tensor(-x)) + x - 1).item() for x in (0.2, -0.1, 0.3, 0.5, 0.0)]
    expect = [sum(per_tok[0:3]), sum(per_tok[1:3]), per_tok[2], sum(per_tok[3:5]), per_tok[4]]
    assert k3.tolist() == pytest.approx(expect, abs=1e-6)


def test_token_normalise_uses_one_mean_and_std_for_all_tokens() -> None:
    values = [0.96, 0.98, 0.97, -0.55, -0.5]
    out = token_normalise(torch.tensor(values), eps=0.0)
    mu, sd = statistics.fmean(values), statistics.stdev(values)
    assert out.tolist() == pytest.approx([(v - mu) / sd for v in values], abs=1e-5)


def test_reinforce_pp_token_advantages_and_gradient_by_hand() -> None:
    scalar, lengths, behaviour, ref = _two_sequences()
    algo = ReinforcePP({"beta": 0.1, "adv_eps": 1e-8})
    adv = algo.token_advantages(scalar, lengths, behaviour, ref)
    returns = [0.96, 0.98, 0.97, -0.55, -0.5]
    mu, sd = statistics.fmean(returns), statistics.stdev(returns)
    expect = [(g - mu) / sd for g in returns]
    assert adv.tolist() == pytest.approx(expect, abs=1e-5)
    # the loss is PPO's clipped surrogate on those advantages; at ratio 1 its gradient is -A
    from arena_core.learn.algorithm import TokenBatch

    logp = behaviour.clone().requires_grad_(True)
    batch = TokenBatch(logp, behaviour, behaviour, torch.ones(5), adv, ref_logp=ref)
    loss, stats = algo.token_loss(batch)
    loss.sum().backward()
    assert logp.grad.tolist() == pytest.approx([-a for a in expect], abs=1e-5)
    # the KL is in the reward, not the loss: the logged k1 KL is the log ratio
    assert stats["kl"].tolist() == pytest.approx([0.2, -0.1, 0.3, 0.5, 0.0], abs=1e-6)


def test_learner_hands_reinforce_pp_its_token_advantages(make_model) -> None:
    """Learner.step calls `token_advantages` with the sampler's and the reference's logprobs in
    the step's flat token order, before the first pass."""
    model = make_model()
    g = torch.Generator().manual_seed(3)
    samples = []
    for i, n in enumerate((3, 5, 2, 4)):
        prompt = torch.randint(1, 64, (4,), generator=g).tolist()
        comp = torch.randint(1, 64, (n,), generator=g).tolist()
        s = Sample(prompt, comp, [0.0] * n, 0.5 if i % 2 else -0.5)
        with torch.no_grad():
            s.behaviour_logp = (completion_logprobs(model, pack([s], 10**6)[0]) + 0.1).tolist()
        samples.append(s)

    seen: dict[str, torch.Tensor] = {}

    class Recording(ReinforcePP):  # the real algorithm; it only keeps what the learner passed
        def token_loss(self, batch):
            seen.setdefault("adv", batch.advantages.detach().clone())
            seen.setdefault("behaviour", batch.behaviour_logp.detach().clone())
            return super().token_loss(batch)

    algo = Recording({"beta": 0.5, "lr": 1e-3, "max_grad_norm": None})
    learner = Learner(model, algo, micro_batch_tokens=10**6, batching="pack")
    metrics = learner.step(samples)
    lengths = [3, 5, 2, 4]
    scalar = torch.repeat_interleave(
        torch.tensor([s.advantage for s in samples]), torch.tensor(lengths)
    )
    behaviour = torch.tensor([x for s in samples for x in s.behaviour_logp])
    with torch.no_grad():  # the reference is the starting policy (full fine-tuning: a copy)
        ref = torch.cat([completion_logprobs(make_model(), pack([s], 10**6)[0]) for s in samples])
    expect = token_normalise(kl_returns(scalar, lengths, behaviour, ref, 0.5), 1e-4)
    # a micro-batch holds the tokens in packing order: place each by its behaviour logprob
    order = [int((behaviour - b).abs().argmin()) for b in seen["behaviour"]]
    assert sorted(order) == list(range(14))
    assert seen["adv"].tolist() == pytest.approx(expect[order].tolist(), abs=1e-4)
    assert abs(float(seen["adv"].mean())) < 1e-5  # normalised over the whole batch
    assert metrics["kl"] == pytest.approx(0.1, abs=1e-4)  # k1 of sampler vs reference, logged
    assert not hasattr(GRPO(), "token_advantages")  # only an algorithm that asks gets the hook

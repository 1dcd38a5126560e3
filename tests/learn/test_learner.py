"""The learner: gradient accumulation equals one big batch; updates move the policy the right way."""

from __future__ import annotations

import copy

import pytest
import torch

from arena_algorithms.cispo import CISPO
from arena_algorithms.grpo import GRPO
from arena_core.learn.learner import Learner, completion_logprobs
from arena_core.learn.packing import Sample, pack


def _samples(model, n: int = 8, seed: int = 1) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(1, 64, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g)
        c = torch.randint(1, 64, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g)
        s = Sample(p.tolist(), c.tolist(), [0.0] * len(c), 1.0 if i % 2 else -1.0)
        with torch.no_grad():
            s.behaviour_logp = completion_logprobs(model, pack([s], 10**6)[0]).tolist()
        out.append(s)
    return out


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("algo_cls", [GRPO, CISPO])
def test_grad_accumulation_equals_one_big_batch(mode: str, algo_cls: type, make_model) -> None:
    tiny_qwen = make_model
    grads = []
    for budget, batching in ((10**6, "pack"), (12, "pad")):  # one packed row vs many padded
        model = tiny_qwen()
        algo = algo_cls({"loss_agg_mode": mode, "lr": 1e-3, "max_grad_norm": None, "beta": 0.0})
        learner = Learner(model, algo, micro_batch_tokens=budget, norm_len=6, batching=batching)
        samples = _samples(model)
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        metrics = learner.step(samples)
        grads.append([p.grad.clone() for p in learner.params])
        assert metrics["micro_batches"] == (1 if budget > 1000 else metrics["micro_batches"])
    assert metrics["micro_batches"] > 1
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_update_raises_logprob_of_positive_advantage(make_model) -> None:
    tiny_qwen = make_model
    model = tiny_qwen()
    samples = _samples(model)
    algo = GRPO({"lr": 1e-2, "beta": 0.0, "max_grad_norm": 1.0})
    learner = Learner(model, algo, micro_batch_tokens=64)
    before = [completion_logprobs(model, pack([s], 10**6)[0]).sum().item() for s in samples]
    m = learner.step(samples)
    after = [completion_logprobs(model, pack([s], 10**6)[0]).sum().item() for s in samples]
    assert m["tokens/loss"] == sum(len(s.completion_ids) for s in samples)
    ups = [a > b for a, b, s in zip(after, before, samples, strict=True) if s.advantage > 0]
    downs = [a < b for a, b, s in zip(after, before, samples, strict=True) if s.advantage < 0]
    assert sum(ups) >= len(ups) - 1 and sum(downs) >= len(downs) - 1
    assert m["is_weight/mean"] == pytest.approx(1.0, abs=1e-4)  # on-policy: old == behaviour


def test_kl_reference_with_lora_and_full_copy(make_model) -> None:
    tiny_qwen = make_model
    from peft import LoraConfig, get_peft_model

    lora = get_peft_model(
        tiny_qwen(), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])
    )
    for model in (lora, tiny_qwen()):
        learner = Learner(model, GRPO({"beta": 0.5, "lr": 1e-2}), micro_batch_tokens=32)
        samples = _samples(model)
        first = learner.step(samples)
        second = learner.step(samples)
        assert first["kl"] == pytest.approx(0.0, abs=1e-6)  # policy == reference at start
        assert second["kl"] > 0


def test_num_iterations_uses_first_pass_as_old_policy(make_model) -> None:
    tiny_qwen = make_model
    model = tiny_qwen()
    learner = Learner(
        model,
        GRPO(
            {
                "num_iterations": 3,
                "lr": 5e-2,
                "eps_low": 0.01,
                "eps_high": 0.01,
                "max_grad_norm": None,
            }
        ),
        micro_batch_tokens=64,
    )
    snapshot = copy.deepcopy(model.state_dict())
    m = learner.step(_samples(model))
    assert any(not torch.equal(v, model.state_dict()[k]) for k, v in snapshot.items())
    assert 0.0 < m["clip_frac"] <= 1.0  # later passes move past the tight clip


def test_kl_is_reported_only_when_computed(make_model) -> None:
    """metrics.csv's `kl` is NaN (the learner leaves it out) when beta = 0, a number otherwise."""
    for beta in (0.0, 0.05):
        model = make_model()
        learner = Learner(model, GRPO({"lr": 1e-3, "beta": beta}), micro_batch_tokens=256)
        metrics = learner.step(_samples(model))
        if beta:
            assert metrics["kl"] >= 0.0
        else:
            assert "kl" not in metrics

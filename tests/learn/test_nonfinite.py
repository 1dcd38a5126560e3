"""A NaN loss never reaches the weights."""

from __future__ import annotations

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.learn.learner import Learner, NonFiniteLossError
from arena_core.learn.packing import Sample


def test_nan_advantage_skips_the_update(model) -> None:
    tiny_model = model
    learner = Learner(tiny_model, GRPO({"lr": 1e-2, "beta": 0.0}), micro_batch_tokens=256)
    before = {n: p.detach().clone() for n, p in tiny_model.named_parameters()}
    samples = [Sample([5, 6, 7], [8, 9], [-1.0, -1.0], float("nan")) for _ in range(4)]
    with pytest.raises(NonFiniteLossError, match="weights are unchanged"):
        learner.step(samples)
    for name, p in tiny_model.named_parameters():
        assert torch.equal(p, before[name]), name


def test_a_nan_in_a_later_pass_says_the_earlier_passes_were_applied(model) -> None:
    """num_iterations > 1: the message must not claim unchanged weights after pass 1 applied."""
    from arena_core.learn.learner import plain_logprobs

    calls = {"n": 0}

    def nan_after_first_pass(hidden, weight, targets):
        calls["n"] += 1
        out = plain_logprobs(hidden, weight, targets)
        return out * float("nan") if calls["n"] > 1 else out

    algo = GRPO({"lr": 1e-2, "beta": 0.0, "num_iterations": 2})
    learner = Learner(model, algo, micro_batch_tokens=10**6, logprob_fn=nan_after_first_pass)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    samples = [Sample([5, 6, 7], [8, 9], [-1.0, -1.0], 1.0 if i % 2 else -1.0) for i in range(4)]
    with pytest.raises(NonFiniteLossError, match="pass 2 of 2") as info:
        learner.step(samples)
    assert "unchanged" not in str(info.value)
    assert "earlier 1 pass(es) were applied" in str(info.value)
    changed = [n for n, p in model.named_parameters() if not torch.equal(p, before[n])]
    assert changed, "the first pass was applied, as the message says"
    assert all(torch.isfinite(p).all() for p in model.parameters())

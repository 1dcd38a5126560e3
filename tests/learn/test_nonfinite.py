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

"""top-k / top-p: the learner scores the distribution the sampler drew from, not the full one."""

from __future__ import annotations

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.kernels import fused_linear_logprob, naive_linear_logprob
from arena_core.kernels.filtering import filter_logits, keep_mask
from arena_core.learn.learner import Learner
from arena_core.learn.packing import Sample
from arena_core.models import load_policy

SETTINGS = [(0, 0.9), (5, 1.0), (7, 0.8)]


@pytest.mark.parametrize(("top_k", "top_p"), SETTINGS)
def test_fused_filtered_logprob_matches_the_reference(top_k, top_p) -> None:
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(37, 16, generator=g, requires_grad=True)
    weight = torch.randn(50, 16, generator=g, requires_grad=True)
    logits = (hidden @ weight.t()).detach()
    # targets the sampler could have drawn: inside each row's kept set
    targets = torch.multinomial(filter_logits(logits, top_k, top_p).softmax(-1), 1, generator=g)
    targets = targets.squeeze(-1)
    for frozen in (False, True):
        w = weight.detach() if frozen else weight
        kw = {"top_k": top_k, "top_p": top_p}
        fused = fused_linear_logprob(hidden, w, targets, chunk_size=8, **kw)
        naive = naive_linear_logprob(hidden, w, targets, **kw)
        torch.testing.assert_close(fused, naive, atol=1e-5, rtol=1e-5)
        expected = torch.log_softmax(filter_logits(logits, top_k, top_p), -1)
        torch.testing.assert_close(fused.detach(), expected.gather(1, targets[:, None])[:, 0])
        inputs = (hidden,) if frozen else (hidden, weight)
        g_fused = torch.autograd.grad(fused.sum(), inputs)
        g_naive = torch.autograd.grad(naive.sum(), inputs)
        for a, b in zip(g_fused, g_naive, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)


def test_a_token_outside_the_kept_set_is_scored_not_minus_infinity() -> None:
    logits = torch.tensor([[4.0, 3.0, -5.0]])
    assert keep_mask(logits, 0, 0.5).tolist() == [[True, False, False]]
    assert keep_mask(logits, 0, 0.5, torch.tensor([2])).tolist() == [[True, False, True]]
    hidden, weight = torch.eye(3), torch.eye(3)
    out = fused_linear_logprob(logits @ hidden, weight, torch.tensor([2]), top_p=0.5)
    assert torch.isfinite(out).all()


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})


@pytest.mark.parametrize(("top_k", "top_p"), [(0, 0.9), (5, 1.0)])
def test_importance_weights_are_one_when_the_learner_scores_the_filtered_policy(
    policy, top_k, top_p
) -> None:
    """`is_weight/mean` (metrics.csv) is 1 on-policy only if the learner applies the filter."""
    backend = TorchBackend(policy.model, policy.tokenizer)
    prompts = [backend.encode_chat([{"role": "user", "content": f"{i}+{i}="}]) for i in range(8)]
    params = SamplingParams(max_new_tokens=8, temperature=1.0, top_k=top_k, top_p=top_p, seed=1)
    comps = backend.generate(prompts, params)
    samples = [
        Sample(c.prompt_ids, c.token_ids, c.logprobs, 1.0 if i % 2 else -1.0)
        for i, c in enumerate(comps)
    ]
    weights = {}
    for filtered in (True, False):
        learner = Learner(
            policy.model,
            GRPO({"lr": 1e-9, "beta": 0.0}),
            top_k=top_k if filtered else 0,
            top_p=top_p if filtered else 1.0,
        )
        learner.optimizer.step = lambda: None  # measure only: the weights stay as sampled
        weights[filtered] = learner.step(samples)["is_weight/mean"]
    assert weights[True] == pytest.approx(1.0, abs=1e-4)
    assert weights[False] < 0.995  # unfiltered scoring down-weights every sampled token


def test_a_custom_head_cannot_silently_ignore_the_filter(model) -> None:
    from arena_core.learn.learner import plain_logprobs

    with pytest.raises(ValueError, match="top_k/top_p"):
        Learner(model, GRPO({"beta": 0.0}), top_p=0.9, logprob_fn=plain_logprobs)

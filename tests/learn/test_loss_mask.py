"""Tool tokens (a multi-turn episode's tool results) are context for the learner: no loss, no
logprob, no importance ratio (`Sample.loss_mask`)."""

from __future__ import annotations

import math

import torch

from arena_algorithms.cispo import CISPO
from arena_algorithms.grpo import GRPO
from arena_core.learn.learner import Learner
from arena_core.learn.packing import Sample, pack, pad_batches
from tests.learn.conftest import tiny_qwen

P, M1, T, M2 = [5, 6, 7], [8, 9, 10], [40, 41, 42, 43], [11, 12]


def _grads(samples: list[Sample], algo_cls: type, batching: str) -> tuple[float, torch.Tensor]:
    model = tiny_qwen()
    algo = algo_cls({"loss_agg_mode": "token-mean", "lr": 1e-3, "max_grad_norm": None})
    learner = Learner(model, algo, micro_batch_tokens=10**6, batching=batching)
    learner.optimizer.step = lambda: None  # keep the gradients to compare them
    learner.optimizer.zero_grad = lambda set_to_none=True: None
    metrics = learner.step(samples)
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return metrics["loss"], grads


def test_packing_targets_only_the_sampled_tokens() -> None:
    s = Sample(P, M1 + T + M2, [-1.0] * 9, 1.0, [1] * 3 + [0] * 4 + [1] * 2)
    assert s.n_targets == 5 and s.target_logp() == [-1.0] * 5
    for mb in (pack([s], 10**6)[0], pad_batches([s], 10**6)[0]):
        assert mb.targets.tolist() == M1 + M2
        flat = mb.input_ids.flatten().tolist()
        # each target is predicted by the position right before it in the full sequence
        assert [flat[p + 1] if p + 1 < len(flat) else None for p in mb.target_pos.tolist()][
            :-1
        ] == (M1 + M2)[:-1]
        assert mb.flat_index.tolist() == list(range(5))


def test_a_masked_episode_trains_like_its_model_turns_alone() -> None:
    """[M1, tool T, M2] with T masked == the samples (P, M1) and (P+M1+T, M2): the tool tokens
    are read as context and nothing else (exact, GRPO and CISPO, packed and padded rows)."""
    for algo_cls, batching in ((GRPO, "pack"), (CISPO, "pad")):
        mask = [1] * 3 + [0] * 4 + [1] * 2
        # the tool tokens' behaviour logprobs are garbage on purpose: never in any ratio
        behaviour = [-1.0, -1.1, -1.2, float("nan"), 50.0, -50.0, float("inf"), -1.3, -1.4]
        episode = Sample(P, M1 + T + M2, behaviour, 1.0, mask)
        split = [
            Sample(P, M1, [-1.0, -1.1, -1.2], 1.0),
            Sample(P + M1 + T, M2, [-1.3, -1.4], 1.0),
        ]
        loss_a, grads_a = _grads([episode], algo_cls, batching)
        loss_b, grads_b = _grads(split, algo_cls, batching)
        assert math.isfinite(loss_a)
        assert abs(loss_a - loss_b) < 1e-6
        torch.testing.assert_close(grads_a, grads_b, rtol=1e-5, atol=1e-7)


def test_without_a_mask_every_completion_token_is_trained() -> None:
    """The mask is what excludes them: unmasked, the same tokens change the update."""
    loss_a, grads_a = _grads([Sample(P, M1 + T + M2, [-1.0] * 9, 1.0)], GRPO, "pack")
    loss_b, grads_b = _grads([Sample(P, M1 + T + M2, [-1.0] * 9, 1.0, [1] * 9)], GRPO, "pack")
    loss_c, _ = _grads(
        [Sample(P, M1 + T + M2, [-1.0] * 9, 1.0, [1] * 3 + [0] * 4 + [1] * 2)], GRPO, "pack"
    )
    assert loss_a == loss_b and torch.equal(grads_a, grads_b)
    assert abs(loss_a - loss_c) > 1e-6

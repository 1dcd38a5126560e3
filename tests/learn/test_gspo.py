"""GSPO against hand-written formulas on a fixed batch (values and gradients), and in the learner."""

from __future__ import annotations

import math

import pytest
import torch

from arena_algorithms.gspo import GSPO, GSPOConfig
from arena_core.learn.algorithm import TokenBatch
from arena_core.learn.learner import Learner, completion_logprobs
from arena_core.learn.losses import aggregate
from arena_core.learn.packing import Sample, pack

SEQS = [0, 0, 0, 1, 1, 2, 2, 2, 2]
LENGTHS = [3, 2, 4]
OLD = [-1.2, -0.4, -2.0, -0.7, -1.1, -0.3, -0.9, -1.6, -0.5]
# learner logprobs after some updates: sequence mean log ratios +0.1, -0.3, +0.0125
DELTA = [0.2, 0.3, -0.2, -0.5, -0.1, 0.05, -0.05, 0.1, -0.05]
ADV = [1.0] * 3 + [-0.5] * 2 + [2.0] * 4
EPS = 0.2


def _batch(logp: torch.Tensor) -> TokenBatch:
    old = torch.tensor(OLD)
    return TokenBatch(
        logp=logp,
        old_logp=old,
        behaviour_logp=old,
        is_weight=torch.ones(9),
        advantages=torch.tensor(ADV),
        seq_ids=torch.tensor(SEQS),
    )


def _hand_sequence_ratios() -> list[float]:
    return [
        math.exp(sum(DELTA[j] for j in range(9) if SEQS[j] == i) / LENGTHS[i]) for i in range(3)
    ]


def test_values_match_the_formula() -> None:
    """loss_it = -min(s_i A_i, clip(s_i, 1-eps, 1+eps) A_i) with s_i the geometric mean ratio."""
    logp = torch.tensor([o + d for o, d in zip(OLD, DELTA, strict=True)])
    loss, stats = GSPO({"eps_low": EPS, "eps_high": EPS}).token_loss(_batch(logp))
    s = _hand_sequence_ratios()
    expected, clipped = [], []
    for t in range(9):
        si, a = s[SEQS[t]], ADV[t]
        expected.append(-min(si * a, min(max(si, 1 - EPS), 1 + EPS) * a))
        clipped.append(float((si > 1 + EPS and a > 0) or (si < 1 - EPS and a < 0)))
    torch.testing.assert_close(loss.detach(), torch.tensor(expected), atol=1e-6, rtol=1e-5)
    # sequence 1 (s = exp(-0.3) = 0.74 < 0.8, A < 0) is clipped as a whole, the others are not
    assert stats["clip_frac"].tolist() == clipped == [0.0] * 3 + [1.0] * 2 + [0.0] * 4


def test_gradient_is_the_sequence_level_objective() -> None:
    """With seq-mean-token-mean weights the token-level form has exactly the gradient of the
    paper's sequence objective (1/G) sum_i -min(s_i A_i, clip(s_i) A_i), s_i = exp(mean log r)."""
    base = [o + d for o, d in zip(OLD, DELTA, strict=True)]
    logp = torch.tensor(base, requires_grad=True)
    loss, _ = GSPO({"eps_low": EPS, "eps_high": EPS}).token_loss(_batch(logp))
    aggregate(loss, LENGTHS, "seq-mean-token-mean").backward()

    ref = torch.tensor(base, requires_grad=True)
    terms = []
    for i, n in enumerate(LENGTHS):
        idx = [j for j in range(9) if SEQS[j] == i]
        s_i = torch.exp((ref[idx] - torch.tensor([OLD[j] for j in idx])).sum() / n)
        a = ADV[idx[0]]
        terms.append(-torch.minimum(s_i * a, s_i.clamp(1 - EPS, 1 + EPS) * a))
    (sum(terms) / 3).backward()
    torch.testing.assert_close(logp.grad, ref.grad, atol=1e-6, rtol=1e-5)
    assert ref.grad[3:5].abs().max() == 0  # the clipped sequence gives no gradient at all
    assert ref.grad[:3].abs().min() > 0  # every token of an unclipped sequence gets one


def test_token_gradient_is_sg_ratio_times_grad_logp() -> None:
    """GSPO-token: d loss_it / d logp_it = -s_i A_it (own token only) inside the clip range."""
    logp = torch.tensor([o + d for o, d in zip(OLD, DELTA, strict=True)], requires_grad=True)
    loss, _ = GSPO({"eps_low": EPS, "eps_high": EPS}).token_loss(_batch(logp))
    loss.sum().backward()
    s = _hand_sequence_ratios()
    unclipped = [-s[SEQS[t]] * ADV[t] if SEQS[t] != 1 else 0.0 for t in range(9)]
    torch.testing.assert_close(logp.grad, torch.tensor(unclipped), atol=1e-6, rtol=1e-5)


def test_defaults_are_the_papers() -> None:
    cfg = GSPOConfig()
    assert (cfg.eps_low, cfg.eps_high) == (3e-4, 4e-4)
    assert cfg.loss_agg_mode == "seq-mean-token-mean"
    with pytest.raises(ValueError, match="seq_ids"):
        GSPO().token_loss(TokenBatch(*(torch.zeros(2),) * 5))


def _samples(model) -> list[Sample]:
    g = torch.Generator().manual_seed(5)
    out = []
    for i in range(6):
        p = torch.randint(1, 64, (4 + i % 3,), generator=g).tolist()
        c = torch.randint(1, 64, (2 + i % 4,), generator=g).tolist()
        s = Sample(p, c, [0.0] * len(c), 1.0 if i % 2 else -1.0)
        with torch.no_grad():
            s.behaviour_logp = completion_logprobs(model, pack([s], 10**6)[0]).tolist()
        out.append(s)
    return out


def test_learner_splits_sequences_over_micro_batches_exactly(make_model) -> None:
    """GSPO needs each sequence whole: gradients are the same with one micro-batch or many."""
    grads = []
    for budget in (10**6, 12):
        model = make_model()
        learner = Learner(
            model, GSPO({"lr": 1e-3, "max_grad_norm": None}), micro_batch_tokens=budget
        )
        learner.optimizer.step = lambda: None  # keep the gradients to compare them
        learner.optimizer.zero_grad = lambda set_to_none=True: None
        metrics = learner.step(_samples(model))
        grads.append([p.grad.clone() for p in learner.params])
    assert metrics["micro_batches"] > 1
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_second_pass_clips_whole_sequences(make_model) -> None:
    """With two passes the ratio moves off 1 after the first update and the paper's tiny range
    clips at least one whole sequence on the second pass (with one pass it never clips)."""
    model = make_model()
    algo = GSPO({"lr": 3e-2, "num_iterations": 2, "loss_agg_mode": "token-mean"})
    samples = _samples(model)
    m = Learner(model, algo, micro_batch_tokens=10**6).step(samples)
    n_tok = sum(len(s.completion_ids) for s in samples)
    clipped_tokens = m["clip_frac"] * 2 * n_tok  # token-mean over both passes
    assert clipped_tokens >= min(len(s.completion_ids) for s in samples)  # a whole sequence

"""Mismatch corrections and metrics against hand-written formulas on a fixed batch (values and
the gradients they let through), and the learner applying the run's choice."""

from __future__ import annotations

import math

import pytest
import torch

from arena_algorithms.grpo import GRPO
from arena_core.learn.algorithm import TokenBatch
from arena_core.learn.learner import Correction, Learner, completion_logprobs, mismatch_metrics
from arena_core.learn.packing import Sample, pack

# three sequences (lengths 3, 2, 4); log ratios old - behaviour per token, chosen so that each
# correction cuts something: a token ratio above 2 and below 0.5, a sequence far off on average
LOG_R = [0.1, -0.2, 0.9, -1.0, 0.95, 0.05, -0.05, -0.75, 0.9]
SEQS = [0, 0, 0, 1, 1, 2, 2, 2, 2]
OLD = [-1.0 - 0.1 * i for i in range(9)]
BEH = [o - lr for o, lr in zip(OLD, LOG_R, strict=True)]
ADV = [1.0, 1.0, 1.0, -0.5, -0.5, 2.0, 2.0, 2.0, 2.0]


def _t(xs: list[float]) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def _hand_weights(mode: str, corr: Correction) -> list[float]:
    r = [math.exp(x) for x in LOG_R]
    if mode == "none":
        return [1.0] * 9
    if mode == "token_tis":
        return [min(x, corr.tis_cap) for x in r]
    if mode == "icepop":
        return [x if corr.band_low <= x <= corr.band_high else 0.0 for x in r]
    out = []
    for i in range(9):  # seq_mask: geometric mean of the sequence's ratios
        mine = [LOG_R[j] for j in range(9) if SEQS[j] == SEQS[i]]
        g = math.exp(sum(mine) / len(mine))
        out.append(g if 1 / corr.seq_cap <= g <= corr.seq_cap else 0.0)
    return out


CORR = Correction(tis_cap=2.0, seq_cap=1.2, band_low=0.5, band_high=2.2)


@pytest.mark.parametrize("mode", ["token_tis", "seq_mask", "icepop", "none"])
def test_correction_weights_match_the_formulas(mode: str) -> None:
    corr = CORR.with_mode(mode)
    w = corr.weight(_t(OLD), _t(BEH), torch.tensor(SEQS))
    expected = _hand_weights(mode, corr)
    torch.testing.assert_close(w, _t(expected), atol=1e-6, rtol=1e-5)
    if mode != "none":  # the fixed batch makes every real correction act
        assert any(e != math.exp(x) for e, x in zip(expected, LOG_R, strict=True))
    if mode == "seq_mask":  # sequence 0 (mean log r 0.267 > log 1.2) is dropped whole
        assert expected[:3] == [0.0] * 3 and all(e > 0 for e in expected[3:])
    if mode == "icepop":  # only the tokens outside [0.5, 2.2] lose their weight
        assert [i for i, e in enumerate(expected) if e == 0] == [2, 3, 4, 7, 8]


@pytest.mark.parametrize("mode", ["token_tis", "seq_mask", "icepop", "none"])
def test_correction_scales_the_gradient_and_masks_it(mode: str) -> None:
    """On-policy (logp == old) the GRPO ratio is 1, so d loss / d logp_t = -w_t A_t exactly."""
    corr = CORR.with_mode(mode)
    logp = _t(OLD).requires_grad_(True)
    batch = TokenBatch(
        logp=logp,
        old_logp=_t(OLD),
        behaviour_logp=_t(BEH),
        is_weight=corr.weight(_t(OLD), _t(BEH), torch.tensor(SEQS)),
        advantages=_t(ADV),
        seq_ids=torch.tensor(SEQS),
    )
    loss, _ = GRPO({"beta": 0.0}).token_loss(batch)
    loss.sum().backward()
    w = _hand_weights(mode, corr)
    torch.testing.assert_close(logp.grad, _t([-wi * a for wi, a in zip(w, ADV, strict=True)]))
    torch.testing.assert_close(loss.detach(), _t([-wi * a for wi, a in zip(w, ADV, strict=True)]))
    assert batch.is_weight.requires_grad is False  # the weight never carries gradient


@pytest.mark.parametrize(("mode", "cut"), [("token_tis", 3), ("seq_mask", 3), ("icepop", 5)])
def test_metrics_match_the_formulas(mode: str, cut: int) -> None:
    corr = CORR.with_mode(mode)
    w = corr.weight(_t(OLD), _t(BEH), torch.tensor(SEQS))
    m = mismatch_metrics(_t(OLD), _t(BEH), w, corr)
    k3 = [math.exp(x) - x - 1 for x in LOG_R]  # KL(sampler || learner), samples from sampler
    assert m["mismatch/kl"] == pytest.approx(sum(k3) / 9, rel=1e-5)
    assert m["mismatch/masked_frac"] == pytest.approx(cut / 9)  # token_tis: truncated at 2
    assert m["mismatch/max_ratio"] == pytest.approx(math.exp(0.95), rel=1e-5)


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="unknown mismatch correction"):
        Correction(mode="tis")
    with pytest.raises(ValueError, match="c must be > 1"):
        Correction(seq_cap=0.9)
    with pytest.raises(ValueError, match="IcePop band"):
        Correction(band_low=1.5, band_high=2.0)


def test_run_config_validates_the_fields() -> None:
    from pydantic import ValidationError

    from arena_core.config.schema import TrainConfig

    assert TrainConfig().is_correction == "token_tis"  # today's default stays
    for bad in ({"is_correction": "tis"}, {"seq_mask_cap": 1.0}, {"icepop_low": 1.5}):
        with pytest.raises(ValidationError):
            TrainConfig(**bad)


def _samples(model, skew: float) -> list[Sample]:
    """Completions whose reported behaviour logprobs are the learner's own shifted by `skew` per
    token on odd sequences: a sampler that disagrees with the learner on half the batch."""
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(6):
        p = torch.randint(1, 64, (5,), generator=g).tolist()
        c = torch.randint(1, 64, (4,), generator=g).tolist()
        s = Sample(p, c, [0.0] * 4, 1.0 if i % 3 else -1.0)
        with torch.no_grad():
            lp = completion_logprobs(model, pack([s], 10**6)[0])
        s.behaviour_logp = (lp - (skew if i % 2 else 0.0)).tolist()
        out.append(s)
    return out


def test_learner_applies_the_run_correction_and_logs_it(make_model) -> None:
    """seq_mask drops exactly the skewed sequences (half the tokens) and the metrics say so;
    the per-token k3 of a constant log ratio d is exp(d) - d - 1."""
    model = make_model()
    learner = Learner(model, GRPO({"lr": 1e-3, "beta": 0.0}), micro_batch_tokens=20, tis_cap=3.0)
    assert learner.correction == Correction(mode="token_tis", tis_cap=3.0)  # today's default
    learner.set_correction("seq_mask")  # what the guard does; the bounds stay the run's
    assert learner.correction == Correction(mode="seq_mask", tis_cap=3.0, seq_cap=1.5)
    m = learner.step(_samples(model, skew=0.6))  # exp(0.6) = 1.82 > 1.5: masked
    assert m["micro_batches"] > 1  # sequences spread over micro-batches: seq_ids are global
    assert m["mismatch/masked_frac"] == pytest.approx(0.5)
    assert m["mismatch/kl"] == pytest.approx(0.5 * (math.exp(0.6) - 0.6 - 1), rel=1e-3)
    assert m["mismatch/max_ratio"] == pytest.approx(math.exp(0.6), rel=1e-3)
    assert m["is_weight/mean"] == pytest.approx(0.5, abs=1e-3)  # kept sequences: g = 1

"""Packing: every completion token is a target exactly once, no padding, no cross-talk."""

from __future__ import annotations

import pytest
import torch

from arena_core.learn.logprobs import completion_logprobs, plain_logprobs
from arena_core.learn.packing import Sample, flat_offsets, pack, pad_batches


def _samples() -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for p_len, c_len in [(5, 3), (7, 1), (4, 6), (6, 0), (3, 4), (9, 2)]:
        p = torch.randint(1, 64, (p_len,), generator=g).tolist()
        c = torch.randint(1, 64, (c_len,), generator=g).tolist()
        out.append(Sample(p, c, [0.0] * c_len, 1.0))
    return out


@pytest.mark.parametrize("batcher", [pack, pad_batches])
def test_batching_keeps_every_completion_token_once_and_no_padding(batcher) -> None:
    samples = _samples()
    n_tok = sum(len(s.completion_ids) for s in samples)
    for budget in (1, 8, 16, 1000):
        mbs = batcher(samples, budget)
        flat = torch.cat([mb.flat_index for mb in mbs]).sort().values
        assert flat.tolist() == list(range(n_tok))
        inputs = sum(mb.n_tokens for mb in mbs)
        # exactly prompt + completion - 1 tokens per non-empty sample: nothing padded
        assert inputs == sum(s.n_input for s in samples if s.completion_ids)
        offsets = flat_offsets(samples)
        targets = torch.empty(n_tok, dtype=torch.long)
        for mb in mbs:
            targets[mb.flat_index] = mb.targets
            if mb.position_ids is not None:  # packed: one row, never a padding token
                assert mb.input_ids.shape == mb.position_ids.shape
                assert mb.n_tokens == mb.input_ids.numel()
            if budget >= 16:
                assert mb.input_ids.numel() <= budget
        for s, off in zip(samples, offsets, strict=True):
            assert targets[off : off + len(s.completion_ids)].tolist() == s.completion_ids


@pytest.mark.parametrize("batcher", [pack, pad_batches])
def test_batched_logprobs_equal_unbatched(model, batcher) -> None:
    samples = _samples()
    ref = []
    for s in samples:  # one sequence at a time, plain full forward
        if not s.completion_ids:
            continue
        ids = torch.tensor([s.prompt_ids + s.completion_ids])
        logits = model(ids).logits[0, len(s.prompt_ids) - 1 : -1]
        ref.append(
            torch.log_softmax(logits, -1).gather(-1, torch.tensor(s.completion_ids)[:, None])[:, 0]
        )
    ref = torch.cat(ref)
    for budget in (1, 24, 1000):
        out = torch.empty_like(ref)
        for mb in batcher(samples, budget):
            out[mb.flat_index] = completion_logprobs(model, mb, logprob_fn=plain_logprobs)
        torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)

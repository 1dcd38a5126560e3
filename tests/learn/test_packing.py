"""Packing: every completion token is a target exactly once, no padding, no cross-talk."""

from __future__ import annotations

import pytest
import torch

from arena_core.learn.learner import completion_logprobs, plain_logprobs
from arena_core.learn.packing import Sample, block_causal_mask, flat_offsets, pack, pad_batches


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


def test_block_causal_mask_allows_only_earlier_tokens_of_the_same_sequence() -> None:
    pos = torch.tensor([[0, 1, 2, 0, 1, 0]])  # three packed sequences of lengths 3, 2, 1
    mask = block_causal_mask(pos, torch.float32)[0, 0]
    seq = [0, 0, 0, 1, 1, 2]
    for q in range(6):
        for k in range(6):
            allowed = seq[q] == seq[k] and k <= q
            assert (mask[q, k] == 0) == allowed, (q, k)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_a_packed_sequence_sees_nothing_of_its_row_neighbours(make_model, attn) -> None:
    """`train.batching=pack`: a sequence's logprobs are the same alone and packed after another
    sequence, whatever attention implementation and transformers version run it."""
    model = make_model()
    model.set_attn_implementation(attn)
    first, second = _samples()[2], _samples()[0]
    alone = completion_logprobs(model, pack([second], 10**6)[0], logprob_fn=plain_logprobs)
    (row,) = pack([first, second], 10**6)  # first is longer: packed first, second after it
    assert row.input_ids.shape[1] == first.n_input + second.n_input
    packed = torch.empty(len(first.completion_ids) + len(second.completion_ids))
    packed[row.flat_index] = completion_logprobs(model, row, logprob_fn=plain_logprobs)
    torch.testing.assert_close(packed[len(first.completion_ids) :], alone, atol=1e-5, rtol=1e-5)
    # the same row under a plain causal mask (no sequence boundaries) gives other numbers: the
    # isolation above is the block mask's doing, not an accident of the inputs
    body = model.get_decoder()
    n = row.input_ids.shape[1]
    causal = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
    hidden = body(
        input_ids=row.input_ids, position_ids=row.position_ids, attention_mask=causal
    ).last_hidden_state.flatten(0, 1)[row.target_pos]
    leaky = plain_logprobs(hidden, model.get_output_embeddings().weight, row.targets)
    leaky_second = torch.empty_like(packed)
    leaky_second[row.flat_index] = leaky
    assert (leaky_second[len(first.completion_ids) :] - alone).abs().max() > 1e-3


def _fill_in_order(lengths: list[int], budget: int) -> int:
    """Tokens computed (padding included) when each micro-batch is filled in order."""
    total, start = 0, 0
    for i in range(1, len(lengths) + 1):
        if i == len(lengths) or (i - start + 1) * lengths[start] > budget:
            total += (i - start) * lengths[start]
            start = i
    return total


def test_padded_micro_batches_cut_where_the_lengths_drop() -> None:
    """A GRPO-like batch (completions that stop early or run to the limit, prompts of a few
    lengths): the micro-batches stay within the budget, keep every row once in order, and pad
    less than filling each micro-batch in order (9% -> 2% on the bench's SmolLM2 batch)."""
    from arena_core.learn.packing import padded_cuts

    g = torch.Generator().manual_seed(3)
    prompts = torch.randint(80, 120, (64,), generator=g)
    ran = torch.rand(64, generator=g) < 0.4  # hit max_new_tokens
    completions = torch.where(ran, 256, torch.randint(20, 250, (64,), generator=g))
    lengths = sorted((prompts + completions).tolist(), reverse=True)
    for budget in (1024, 4096, 8192):
        cuts = padded_cuts(lengths, budget)
        assert cuts[0] == 0 and cuts[-1] == len(lengths) and cuts == sorted(set(cuts))
        area = 0
        for a, b in zip(cuts, cuts[1:], strict=False):
            assert (b - a) * lengths[a] <= budget  # every sequence fits the budget here
            area += (b - a) * lengths[a]
        padding, filled = area - sum(lengths), _fill_in_order(lengths, budget) - sum(lengths)
        assert padding < 0.7 * filled  # here: 318 -> 207, 1504 -> 622, 2292 -> 985 tokens
    assert padded_cuts([5000, 300, 200], 4096) == [0, 1, 3]  # too long for the budget: alone
    assert padded_cuts([], 4096) == [0]

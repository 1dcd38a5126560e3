"""What a sample request asks about its prompt, through the official tinker SDK against
`arena tinker serve`: `include_prompt_logprobs`, `topk_prompt_logprobs` and
`prompt_logprobs_last_n` give each position's logprob and its k likeliest tokens as the base
model's own forward scores them, the positions before the last N unscored;
`target_prompt_logprobs` the logprobs of the ids it names, dense or sparse (tinker-cookbook's
`sample_decision` runs on it); `prompt_alt_tokens_k` draws at each position with their
logprobs; `topk_sample_logprobs` the k likeliest tokens at each sampled token, of the
distribution it was drawn from, through the sampler's adapter; a malformed request is refused
by name."""

from __future__ import annotations

import pytest
import torch

from tests.tinker.conftest import BASE


def _base_logits(ids: list[int]) -> torch.Tensor:
    """The base model's own logits at every prompt position but the last ([n - 1, vocab])."""
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": BASE, "lora": {"r": 0}})
    with torch.no_grad():
        return policy.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()


def test_a_sample_scores_its_prompt_and_the_top_k_there(service, tokenizer) -> None:
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    ids = tokenizer.encode("12+30=42")
    prompt = types.ModelInput.from_ints(ids)
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    got = sampler.sample(
        prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result()
    logp = torch.log_softmax(_base_logits(ids), dim=-1)
    want = logp.gather(-1, torch.tensor(ids[1:])[:, None]).squeeze(-1)
    assert got.prompt_logprobs[0] is None and got.topk_prompt_logprobs[0] is None
    assert torch.allclose(torch.tensor(got.prompt_logprobs[1:]), want, atol=1e-4)
    for at, row in enumerate(got.topk_prompt_logprobs[1:]):
        best = logp[at].topk(3)
        assert [t for t, _ in row] == best.indices.tolist()
        assert torch.allclose(torch.tensor([v for _, v in row]), best.values, atol=1e-4)

    last = sampler.sample(
        prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=2,
        prompt_logprobs_last_n=3,
    ).result()  # fmt: skip
    n = len(ids)
    assert last.prompt_logprobs[: n - 3] == [None] * (n - 3)
    assert last.topk_prompt_logprobs[: n - 3] == [None] * (n - 3)
    assert last.prompt_logprobs[n - 3 :] == pytest.approx(got.prompt_logprobs[n - 3 :])
    assert [len(row) for row in last.topk_prompt_logprobs[n - 3 :]] == [2, 2, 2]
    only_topk = sampler.sample(prompt, 1, params, topk_prompt_logprobs=1).result()
    assert only_topk.prompt_logprobs is None and len(only_topk.topk_prompt_logprobs) == n


@pytest.mark.parametrize(
    ("asked", "says"),
    [
        ({"topk_sample_logprobs": 21}, "topk_sample_logprobs=21: give 0 to 20 tokens per sampled"),
        ({"prompt_alt_tokens_k": 21}, "prompt_alt_tokens_k=21: give 0 to 20"),
        ({"topk_prompt_logprobs": 21}, "give 0 to 20"),
        ({"prompt_logprobs_last_n": 2}, "include_prompt_logprobs"),
        ({"include_prompt_logprobs": True, "prompt_logprobs_last_n": 99}, "give 1 to"),
    ],
)
def test_what_is_asked_out_of_range_is_refused_by_name(
    service, tokenizer, asked: dict, says: str
) -> None:
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("1+1=2"))
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    with pytest.raises(Exception, match=says):
        sampler.sample(prompt, 1, params, **asked).result()


def test_target_logprobs_score_the_ids_asked_dense_or_sparse(service, tokenizer) -> None:
    """Each named id's logprob where it is named, NaN in a dense request's -1 cells; a sparse
    request gets its cells back sparse; tinker-cookbook's `sample_decision` (one sparse row of
    label ids) gets the softmax over its labels."""
    import asyncio

    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    ids = tokenizer.encode("12+30=42")
    n, prompt = len(ids), types.ModelInput.from_ints(ids)
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    logp = torch.log_softmax(_base_logits(ids), dim=-1)
    asked = torch.full((n - 1, 3), -1, dtype=torch.int64)
    asked[2] = torch.tensor([ids[3], 5, 7])
    asked[n - 2, 0] = ids[-1]
    listed = asked >= 0
    want = logp.gather(-1, asked.clamp(min=0))
    dense = sampler.sample(
        prompt, 1, params, target_prompt_logprobs=types.TensorData.from_torch(asked)
    ).result()
    got = dense.target_prompt_logprobs.to_torch()
    assert got.shape == (n - 1, 3) and torch.isnan(got[~listed]).all()
    assert torch.allclose(got[listed], want[listed], atol=1e-4)
    assert dense.prompt_logprobs is None and dense.prompt_alt_tokens is None
    sparse_ask = types.TensorData.from_torch_sparse(asked, pad_value=-1)
    assert sparse_ask.sparse_crow_indices is not None
    sparse = sampler.sample(prompt, 1, params, target_prompt_logprobs=sparse_ask).result()
    back = sparse.target_prompt_logprobs
    assert back.sparse_col_indices == sparse_ask.sparse_col_indices
    assert torch.allclose(back.to_torch()[listed], want[listed], atol=1e-4)

    decision = pytest.importorskip("tinker_cookbook.recipes.decisions.decision")
    labels = {"yes": ids[-1], "no": 5, "maybe": 7}
    rendering = decision.DecisionRendering(tokens=ids, choice_pos=n - 1, label_tokens=labels)
    probabilities = asyncio.run(decision.sample_decision(sampler, rendering))
    expected = torch.softmax(logp[n - 2, list(labels.values())], dim=0)
    assert list(probabilities) == list(labels)
    assert torch.allclose(torch.tensor(list(probabilities.values())), expected, atol=1e-4)


def test_alternative_draws_come_with_their_logprobs(service, tokenizer) -> None:
    """`prompt_alt_tokens_k`: k draws at every prompt position after the first, at the request's
    temperature, each with its logprob under the distribution it was drawn from; a seed repeats
    them; greedy repeats the likeliest token."""
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    ids = tokenizer.encode("12+30=42")
    n, prompt = len(ids), types.ModelInput.from_ints(ids)
    logits = _base_logits(ids)
    warm = types.SamplingParams(max_tokens=1, temperature=1.5, seed=3)
    first = sampler.sample(prompt, 1, warm, prompt_alt_tokens_k=4).result().prompt_alt_tokens
    tokens, logprobs = first.tokens.to_torch(), first.logprobs.to_torch()
    assert tokens.shape == logprobs.shape == (n - 1, 4) and tokens.dtype == torch.int64
    drawn_from = torch.log_softmax(logits / 1.5, dim=-1)
    assert torch.allclose(logprobs, drawn_from.gather(-1, tokens), atol=1e-4)
    again = sampler.sample(prompt, 1, warm, prompt_alt_tokens_k=4).result().prompt_alt_tokens
    assert torch.equal(again.tokens.to_torch(), tokens)
    greedy = types.SamplingParams(max_tokens=1, temperature=0.0)
    top = sampler.sample(prompt, 1, greedy, prompt_alt_tokens_k=2).result().prompt_alt_tokens
    best = torch.log_softmax(logits, dim=-1).max(-1)
    assert torch.equal(top.tokens.to_torch(), best.indices[:, None].expand(-1, 2))
    assert torch.allclose(top.logprobs.to_torch(), best.values[:, None].expand(-1, 2), atol=1e-4)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda n: torch.full((n, 2), 3), "expected \\["),
        (lambda n: torch.full((n - 1, 2), -1), "names no token id"),
        (lambda n: torch.full((n - 1, 1), 10**6), "outside"),
        (lambda n: torch.full((n - 1, 1), -2), "is not a token id"),
        (lambda n: torch.full((n - 1, 1), 1.0), "int64"),
    ],
)
def test_a_malformed_target_request_is_refused_by_name(service, tokenizer, make, says) -> None:
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    ids = tokenizer.encode("1+1=2")
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    asked = types.TensorData.from_torch(make(len(ids)))
    with pytest.raises(Exception, match=says):
        sampler.sample(
            types.ModelInput.from_ints(ids), 1, params, target_prompt_logprobs=asked
        ).result()


def _ranked(row: list[tuple[int, float]]) -> tuple[list[int], torch.Tensor]:
    return [t for t, _ in row], torch.tensor([v for _, v in row])


def test_each_sampled_token_gets_the_top_k_of_the_distribution_it_was_drawn_from(
    service, tokenizer, sft_datum
) -> None:
    """Greedy: the model's own top-k, the sampled token first with its logprob. At a temperature
    with top_k=2: the two tokens left, renormalised at that temperature (a third asked for is
    not listed: its probability is 0), the sampled one among them with its `logprobs` entry.
    Through a trained adapter: the adapter's distribution, not the base's."""
    from tinker import types

    ids = tokenizer.encode("12+30=")
    prompt = types.ModelInput.from_ints(ids)
    base = service.create_sampling_client(base_model=BASE).result()
    greedy = types.SamplingParams(max_tokens=6, temperature=0.0, stop=[])
    got = base.sample(prompt, 2, greedy, topk_sample_logprobs=3).result()
    for seq in got.sequences:
        assert len(seq.topk_logprobs) == len(seq.tokens) == 6
        logp = torch.log_softmax(_base_logits(ids + seq.tokens)[-6:], dim=-1)
        for at, row in enumerate(seq.topk_logprobs):
            tokens, values = _ranked(row)
            best = logp[at].topk(3)
            assert tokens == best.indices.tolist() and tokens[0] == seq.tokens[at]
            assert torch.allclose(values, best.values, atol=1e-4)
            assert values[0].item() == pytest.approx(seq.logprobs[at], abs=1e-4)

    warm = types.SamplingParams(max_tokens=6, temperature=0.7, top_k=2, seed=3, stop=[])
    drawn = base.sample(prompt, 2, warm, topk_sample_logprobs=3).result()
    for seq in drawn.sequences:
        logits = _base_logits(ids + seq.tokens)[-len(seq.tokens) :] / 0.7
        for at, row in enumerate(seq.topk_logprobs):
            tokens, values = _ranked(row)
            kept = logits[at].topk(2)
            assert tokens == kept.indices.tolist()
            assert torch.allclose(values, torch.log_softmax(kept.values, dim=-1), atol=1e-4)
            assert dict(row)[seq.tokens[at]] == pytest.approx(seq.logprobs[at], abs=1e-4)
    plain = base.sample(prompt, 1, warm).result()
    assert plain.sequences[0].topk_logprobs is None  # not asked, not sent

    training = service.create_lora_training_client(base_model=BASE, rank=4, seed=8).result()
    datum = sft_datum("12+30=", "42")
    for _ in range(3):
        training.forward_backward([datum], "cross_entropy").result()
        training.optim_step(types.AdamParams(learning_rate=2e-2)).result()
    tuned = training.save_weights_and_get_sampling_client().result()
    seq = tuned.sample(prompt, 1, greedy, topk_sample_logprobs=2).result().sequences[0]
    base_logp = torch.log_softmax(_base_logits(ids + seq.tokens)[-6:], dim=-1)
    moved = 0.0
    for at, row in enumerate(seq.topk_logprobs):
        tokens, values = _ranked(row)
        assert tokens[0] == seq.tokens[at]
        assert values[0].item() == pytest.approx(seq.logprobs[at], abs=1e-4)
        moved = max(moved, (values - base_logp[at, tokens]).abs().max().item())
    assert moved > 1e-2  # ranked under the trained adapter, not the base

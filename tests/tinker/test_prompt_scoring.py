"""What a sample request asks about its prompt, through the official tinker SDK against
`arena tinker serve`: `include_prompt_logprobs`, `topk_prompt_logprobs` and
`prompt_logprobs_last_n` give each position's logprob and its k likeliest tokens as the base
model's own forward scores them, the positions before the last N unscored; what the server does
not compute is refused by name."""

from __future__ import annotations

import pytest
import torch

from tests.tinker.conftest import BASE


def test_a_sample_scores_its_prompt_and_the_top_k_there(service, tokenizer) -> None:
    from tinker import types

    from arena_core.models import load_policy

    sampler = service.create_sampling_client(base_model=BASE).result()
    ids = tokenizer.encode("12+30=42")
    prompt = types.ModelInput.from_ints(ids)
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    got = sampler.sample(
        prompt, 1, params, include_prompt_logprobs=True, topk_prompt_logprobs=3
    ).result()
    policy = load_policy({"name_or_path": BASE, "lora": {"r": 0}})
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
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
        ({"topk_sample_logprobs": 2}, "topk_sample_logprobs is not computed"),
        ({"prompt_alt_tokens_k": 2}, "prompt_alt_tokens_k is not computed"),
        ({"topk_prompt_logprobs": 21}, "give 0 to 20"),
        ({"prompt_logprobs_last_n": 2}, "include_prompt_logprobs"),
        ({"include_prompt_logprobs": True, "prompt_logprobs_last_n": 99}, "give 1 to"),
    ],
)
def test_what_the_server_does_not_score_is_refused_by_name(
    service, tokenizer, asked: dict, says: str
) -> None:
    from tinker import types

    sampler = service.create_sampling_client(base_model=BASE).result()
    prompt = types.ModelInput.from_ints(tokenizer.encode("1+1=2"))
    params = types.SamplingParams(max_tokens=1, temperature=0.0)
    with pytest.raises(Exception, match=says):
        sampler.sample(prompt, 1, params, **asked).result()

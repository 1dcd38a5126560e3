"""vLLM's `prompt_logprobs` on chat, completions and prime-rl's token route, with the official
`openai` client against a server over the embedded tiny model: each prompt token after the first
gets its logprob and rank under the model's own forward, listed first, then its position's k
likeliest, in vLLM's layout; prime-rl's on-policy distillation teacher (prompt + completion sent
as `tokens`, `prompt_logprobs: true`, `max_tokens: 1`) reads the teacher's logprob of every
completion token; what cannot be answered is refused by name.

Traffic goes only to 127.0.0.1, to the server conftest.py's `server` fixture starts and stops.
"""

from __future__ import annotations

import openai
import pytest
import torch
from openai import OpenAI


def _log_softmax(ids: list[int]) -> torch.Tensor:
    """The tiny model's own log_softmax at every position but the last ([n - 1, vocab])."""
    from arena_core.models import load_policy

    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with torch.no_grad():
        logits = policy.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
    return torch.log_softmax(logits, dim=-1)


def _check(scored: list, ids: list[int], k: int) -> None:
    """`scored` is vLLM's prompt_logprobs of `ids` with `k` alternatives, as the model scores."""
    logp = _log_softmax(ids)
    assert len(scored) == len(ids) and scored[0] is None
    for at, (token, entry) in enumerate(zip(ids[1:], scored[1:], strict=True)):
        own = logp[at, token]
        first = next(iter(entry))
        assert first == str(token)  # the prompt's own token first, as vLLM lists it
        assert entry[first]["logprob"] == pytest.approx(own.item(), abs=1e-4)
        assert entry[first]["rank"] == int((logp[at] > own).sum()) + 1
        best = logp[at].topk(k)
        ranked = zip(best.indices.tolist(), best.values.tolist(), strict=True)
        for place, (t, v) in enumerate(ranked, 1):
            assert entry[str(t)]["rank"] == place
            assert entry[str(t)]["logprob"] == pytest.approx(v, abs=1e-4)
        assert len(entry) == k + (str(token) not in {str(t) for t in best.indices.tolist()})


def test_chat_and_completions_score_their_prompts_in_vllms_layout(client: OpenAI) -> None:
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What is 12+30?"}],
        max_tokens=1,
        extra_body={"prompt_logprobs": 2, "return_token_ids": True},
    ).model_dump()
    _check(chat["prompt_logprobs"], chat["prompt_token_ids"], 2)
    assert "prompt_logprobs" not in chat["choices"][0]

    # completions: each choice's own; echo's legacy logprobs keep their own k beside it
    got = client.completions.create(
        model="tiny", prompt="12+30=42", max_tokens=0, echo=True, logprobs=1,
        extra_body={"prompt_logprobs": 3, "return_token_ids": True},
    ).model_dump()["choices"][0]  # fmt: skip
    _check(got["prompt_logprobs"], got["prompt_token_ids"], 3)
    assert all(len(top) <= 2 for top in got["logprobs"]["top_logprobs"][1:])
    plain = client.completions.create(model="tiny", prompt="12+30=", max_tokens=2)
    assert "prompt_logprobs" not in plain.choices[0].model_dump()


def test_a_teacher_scores_a_rollout_sent_as_tokens(client: OpenAI, tokenizer_ids) -> None:
    """prime-rl's teacher request: the rollout's prompt and completion ids as `tokens`, vLLM's
    `prompt_logprobs: true` (one alternative), one token generated; the teacher's logprob of
    each completion token is the first entry of its position."""
    prompt, completion = tokenizer_ids("What is 2+2?"), tokenizer_ids("<answer>4</answer>")
    tokens = prompt + completion
    body = {
        "model": "tiny", "messages": [{"role": "user", "content": ""}], "tokens": tokens,
        "max_tokens": 1, "temperature": 1.0, "top_p": 1.0, "prompt_logprobs": True,
    }  # fmt: skip
    answer = client.post("/chat/completions/tokens", body=body, cast_to=object)
    _check(answer["prompt_logprobs"], tokens, 1)
    teacher = [next(iter(entry.values()))["logprob"] for entry in answer["prompt_logprobs"][1:]]
    logp = _log_softmax(tokens)
    want = logp[len(prompt) - 1 :].gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)
    assert teacher[len(prompt) - 1 :] == pytest.approx(want.tolist(), abs=1e-4)


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"prompt_logprobs": 21}, "less than or equal to 20"),
        ({"prompt_logprobs": -1}, "greater than or equal to 0"),
        ({"prompt_logprobs": 1, "stream": True}, "send stream: false"),
    ],
)
def test_what_cannot_be_scored_is_refused_by_name(client: OpenAI, extra: dict, says: str) -> None:
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/chat/completions", body={**body, **extra}, cast_to=object)
    assert info.value.body["param"] == "prompt_logprobs" and says in info.value.message


@pytest.fixture(scope="module")
def tokenizer_ids(client: OpenAI):
    """text -> the tiny model's token ids, from the server's own `/tokenize`."""
    base = str(client.base_url).removesuffix("/v1/")

    def ids(text: str) -> list[int]:
        import httpx

        answer = httpx.post(f"{base}/tokenize", json={"model": "tiny", "prompt": text})
        return answer.json()["tokens"]

    return ids

"""What agents and RL clients send, with the official `openai` client, against a server over the
embedded tiny model started the way a run starts one (`serve_policy`): strict requests, logprobs
that equal the model's own, token ids for RL clients, prompts sent as token ids.

Traffic goes only to 127.0.0.1, to the server the fixture starts and stops.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest
import torch
from openai import OpenAI

from arena_core.models import load_policy
from arena_core.serve.server import serve_policy

CHAT = [{"role": "user", "content": "What is 12+30?"}]


@pytest.fixture(scope="module")
def policy():
    return load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})


@pytest.fixture(scope="module")
def server(policy) -> Iterator[str]:
    with serve_policy(policy, name="tiny") as srv:
        yield srv.url


@pytest.fixture(scope="module")
def client(server: str) -> OpenAI:
    return OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0, timeout=60)


# -- strict requests ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"max_tokens": "16"}, "max_tokens"),
        ({"temperature": "0.5"}, "temperature"),
        ({"stream": 1}, "stream"),
        ({"n": 1.0}, "n"),
        ({"frobnicate": 1}, "frobnicate"),
        ({"presence_penalty": "0.5"}, "presence_penalty"),
        ({"logit_bias": {"1": "5"}}, "logit_bias.1"),
        ({"store": True}, "store"),
        ({"modalities": ["text", "audio"]}, "modalities.1"),
        ({"stream_options": {"include_usage": True, "x": 1}}, "stream_options.x"),
    ],
)
def test_a_wrong_type_or_unknown_field_is_a_400_naming_it(
    client: OpenAI, extra: dict, param: str
) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=CHAT, extra_body=extra)
    err = info.value.body
    assert set(err) == {"message", "type", "param", "code"}  # OpenAI's error shape
    assert err["param"] == param and param.split(".")[-1] in err["message"]
    assert err["type"] == "invalid_request_error"


def test_settings_sent_at_their_neutral_value_change_nothing(client: OpenAI) -> None:
    """What verifiers' sampling_args, chat UIs and agent SDKs send by default (a penalty of 0, an
    empty logit bias, `store: false`) asks for nothing: the answer is the one without them, on
    both endpoints (tests/serve/test_penalties.py sends other values)."""
    neutral = {
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logit_bias": {},
        "user": "user-42",
        "store": False,
        "metadata": {"team": "rl"},
        "service_tier": "auto",
        "modalities": ["text"],
    }
    vllm_neutral = {"repetition_penalty": 1.0, "min_p": 0.0, "top_k": -1}
    plain = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=12, temperature=0
    )
    sent = client.chat.completions.create(
        model="tiny", messages=CHAT, max_tokens=12, temperature=0, **neutral,
        extra_body=vllm_neutral,
    )  # fmt: skip
    assert sent.choices[0].message.content == plain.choices[0].message.content
    legacy = {"presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}, "user": "u"}
    base = client.completions.create(model="tiny", prompt="12+30=", max_tokens=6, temperature=0)
    also = client.completions.create(
        model="tiny", prompt="12+30=", max_tokens=6, temperature=0, **legacy,
        extra_body=vllm_neutral,
    )  # fmt: skip
    assert also.choices[0].text == base.choices[0].text


def test_an_unknown_message_field_and_a_bad_role_are_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "x", "audio": {}}]
        )
    assert info.value.body["param"] == "messages.0.audio"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=[{"role": "robot", "content": "x"}])
    assert "messages.0.role" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:  # completions are strict too
        client.completions.create(model="tiny", prompt="1+1=", best_of=2)
    assert info.value.body["param"] == "best_of"


def test_a_model_not_served_is_a_404_listing_the_served_ones(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=CHAT, max_tokens=2)
    assert info.value.body["code"] == "model_not_found" and info.value.body["param"] == "model"
    assert "served models: tiny" in info.value.message


# -- logprobs ----------------------------------------------------------------------------------


def _reference_logprobs(policy, prompt: list[int], completion: list[int]) -> torch.Tensor:
    """log p(completion[t] | prompt + completion[:t]) from one plain forward pass."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float()
    logp = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]
    return logp.gather(-1, torch.tensor(completion)[:, None]).squeeze(-1)


def test_greedy_chat_logprobs_equal_a_forward_pass_and_are_the_top_entry(
    client: OpenAI, policy
) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=16,
        temperature=0,
        logprobs=True,
        top_logprobs=5,
        extra_body={"return_token_ids": True},
    )
    choice = r.choices[0]
    content = choice.logprobs.content
    ids = choice.token_ids  # vLLM's extension, kept by the openai client as an extra field
    prompt = r.prompt_token_ids
    assert len(content) == len(ids) > 0
    expected = _reference_logprobs(policy, prompt, ids)
    got = torch.tensor([c.logprob for c in content])
    assert torch.allclose(got, expected, atol=1e-4), (got, expected)
    for entry in content:
        assert len(entry.top_logprobs) == 5
        assert entry.top_logprobs[0].token == entry.token  # greedy: the likeliest token
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob)
        assert [t.logprob for t in entry.top_logprobs] == sorted(
            (t.logprob for t in entry.top_logprobs), reverse=True
        )
    # the text is the tokens' text (the EOS that ended it has no text)
    assert "".join(c.token for c in content if c.token != "<|im_end|>") == choice.message.content


def test_streamed_logprobs_and_token_ids_equal_the_non_streamed_ones(client: OpenAI) -> None:
    kw = dict(model="tiny", messages=CHAT, max_tokens=12, temperature=0, logprobs=True)
    full = client.chat.completions.create(
        **kw, top_logprobs=2, extra_body={"return_token_ids": True}
    )
    chunks = list(
        client.chat.completions.create(
            **kw, top_logprobs=2, stream=True, extra_body={"return_token_ids": True}
        )
    )
    assert chunks[0].prompt_token_ids == full.prompt_token_ids
    streamed = [
        e
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for e in c.choices[0].logprobs.content
    ]
    ids = [t for c in chunks if c.choices for t in (getattr(c.choices[0], "token_ids", None) or [])]
    assert [e.logprob for e in streamed] == [e.logprob for e in full.choices[0].logprobs.content]
    assert ids == full.choices[0].token_ids
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == (
        full.choices[0].message.content
    )


def test_completions_logprobs_n_and_sampled_logprobs_follow_the_temperature(
    client: OpenAI, policy
) -> None:
    r = client.completions.create(
        model="tiny",
        prompt="12+3=",
        max_tokens=6,
        temperature=0,
        logprobs=3,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 6
    assert lp.text_offset[0] == 0 and "".join(lp.tokens) == r.choices[0].text
    assert all(
        max(top.values()) == pytest.approx(v)
        for top, v in zip(lp.top_logprobs, lp.token_logprobs, strict=True)
    )
    prompt = r.choices[0].prompt_token_ids
    expected = _reference_logprobs(policy, prompt, r.choices[0].token_ids)
    assert torch.allclose(torch.tensor(lp.token_logprobs), expected, atol=1e-4)
    # sampling at temperature T: the logprob of the distribution sampled from, log_softmax(z/T)
    hot = client.completions.create(
        model="tiny",
        prompt="12+3=",
        max_tokens=6,
        temperature=0.5,
        logprobs=1,
        seed=3,
        extra_body={"return_token_ids": True, "ignore_eos": True},
    )
    ids = torch.tensor([prompt + hot.choices[0].token_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0].float() / 0.5
    ref = (
        torch.log_softmax(logits, -1)[len(prompt) - 1 : -1]
        .gather(-1, torch.tensor(hot.choices[0].token_ids)[:, None])
        .squeeze(-1)
    )
    assert torch.allclose(torch.tensor(hot.choices[0].logprobs.token_logprobs), ref, atol=1e-4)


def test_top_logprobs_above_20_is_a_400(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=CHAT, logprobs=True, top_logprobs=21)
    assert info.value.body["param"] == "top_logprobs"


# -- token ids ---------------------------------------------------------------------------------


def test_token_ids_as_verifiers_reads_them(client: OpenAI, policy) -> None:
    """prime-rl sends logprobs + return_token_ids and reads top-level prompt_token_ids,
    choices[0].token_ids and choices[0].logprobs.content[].logprob, aligned."""
    r = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=10,
        temperature=1.0,
        logprobs=True,
        extra_body={"return_token_ids": True},
    )
    tok = policy.tokenizer
    rendered = tok.apply_chat_template(CHAT, tokenize=False, add_generation_prompt=True)
    assert r.prompt_token_ids == tok.encode(rendered, add_special_tokens=False)
    choice = r.choices[0]
    assert len(choice.token_ids) == len(choice.logprobs.content)
    assert tok.decode(choice.token_ids, skip_special_tokens=True) == choice.message.content
    plain = client.chat.completions.create(model="tiny", messages=CHAT, max_tokens=4)
    assert "token_ids" not in plain.choices[0].model_extra  # only when asked for
    assert "prompt_token_ids" not in plain.model_extra


def test_a_prompt_sent_as_token_ids_answers_like_its_text(client: OpenAI, policy) -> None:
    ids = policy.tokenizer.encode("7*8=", add_special_tokens=False)
    by_text = client.completions.create(model="tiny", prompt="7*8=", max_tokens=8, temperature=0)
    by_ids = client.completions.create(model="tiny", prompt=ids, max_tokens=8, temperature=0)
    two = client.completions.create(model="tiny", prompt=[ids, ids], max_tokens=8, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert [c.text for c in two.choices] == [by_text.choices[0].text] * 2
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt=[10**9], max_tokens=2)
    assert "vocabulary" in info.value.message


def test_the_training_engine_behind_a_loopback_endpoint(policy) -> None:
    """A run's own TorchBackend served in-process: the environment's rollout code talks to the
    policy being trained, and the backend keeps generating for the run afterwards."""
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend

    backend = TorchBackend(policy.model, policy.tokenizer)
    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    before = backend.generate_text(["5+4="], params)[0].text
    with serve_policy(backend, name="policy") as srv:
        assert srv.url.startswith("http://127.0.0.1:")
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        served = client.completions.create(
            model="policy", prompt="5+4=", max_tokens=8, temperature=0
        )
        assert served.choices[0].text == before
        assert httpx.get(f"{srv.url}/health").json()["status"] == "ok"
    assert backend.generate_text(["5+4="], params)[0].text == before  # not closed with the server

"""The official `openai` client against `arena deploy` of a quickstart checkpoint."""

from __future__ import annotations

import asyncio
import json

import httpx
import openai
import pytest
from openai import OpenAI

CHAT = [{"role": "user", "content": "What is 12+30?"}]


@pytest.fixture(scope="module")
def client(deployed: str, api_key: str) -> OpenAI:
    return OpenAI(base_url=f"{deployed}/v1", api_key=api_key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def model(client: OpenAI, quick_run) -> str:
    return client.models.list().data[0].id


def test_models_list_names_the_deployed_run(client: OpenAI, quick_run) -> None:
    data = client.models.list().data
    assert [m.id for m in data] == [quick_run.name]
    assert data[0].owned_by == "arena"


def test_chat_non_stream_answers_with_usage(client: OpenAI, model: str) -> None:
    r = client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0)
    choice = r.choices[0]
    assert r.object == "chat.completion" and choice.index == 0
    assert choice.message.role == "assistant" and choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 24
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_chat_stream_equals_the_non_streamed_greedy_answer(client: OpenAI, model: str) -> None:
    full = client.chat.completions.create(model=model, messages=CHAT, max_tokens=24, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=model, messages=CHAT, max_tokens=24, temperature=0, stream=True
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == full.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == full.choices[0].finish_reason
    assert all(c.usage is None for c in chunks)  # no usage chunk unless asked for


def test_n2_stream_carries_each_choice_index(client: OpenAI, model: str) -> None:
    stream = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=20, temperature=1.0, n=2, stream=True, seed=1
    )
    texts, finished = {0: "", 1: ""}, {}
    for chunk in stream:
        assert len(chunk.choices) == 1
        c = chunk.choices[0]
        texts[c.index] += c.delta.content or ""
        if c.finish_reason:
            finished[c.index] = c.finish_reason
    assert set(finished) == {0, 1}  # both choices ended, each under its own index
    assert texts[0] and texts[1]
    greedy = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=20, temperature=0
    )
    texts = {0: "", 1: ""}
    for chunk in client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=20, temperature=0, n=2, stream=True
    ):
        texts[chunk.choices[0].index] += chunk.choices[0].delta.content or ""
    assert texts[0] == texts[1] == greedy.choices[0].message.content  # no piece under a wrong index


def test_include_usage_adds_one_final_chunk_with_empty_choices(client: OpenAI, model: str) -> None:
    chunks = list(
        client.completions.create(
            model=model,
            prompt="12+3=",
            max_tokens=10,
            temperature=0,
            n=2,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert all(c.choices and c.usage is None for c in chunks[:-1])
    assert 2 <= last.usage.completion_tokens <= 20
    assert last.usage.prompt_tokens == 5  # byte-level: one token per character


def test_stop_string_ends_the_answer_and_is_not_returned(client: OpenAI, model: str) -> None:
    free = client.completions.create(model=model, prompt="7*6=", max_tokens=30, temperature=0)
    text = free.choices[0].text
    assert len(text) >= 4, text
    stop = text[2:4]  # a string greedy decoding is known to produce
    cut = text[: text.find(stop)]
    for stream in (False, True):
        r = client.completions.create(
            model=model, prompt="7*6=", max_tokens=30, temperature=0, stop=[stop], stream=stream
        )
        chunks = list(r) if stream else [r]
        assert "".join(c.choices[0].text for c in chunks) == cut
        reasons = [c.choices[0].finish_reason for c in chunks]
        assert "stop" in reasons


def test_greedy_server_completions_equal_in_process_generation(
    client: OpenAI, model: str, quick_run
) -> None:
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.models import load_policy

    prompts = ["12+3=", "What is 40-2?", "7*8="]
    served = client.completions.create(model=model, prompt=prompts, max_tokens=20, temperature=0)
    texts = [c.text for c in sorted(served.choices, key=lambda c: c.index)]
    best = quick_run.best()
    policy = load_policy({"name_or_path": str(best.path), "lora": {"r": 0}})
    local = TorchBackend(policy.model, policy.tokenizer).generate_text(
        prompts, SamplingParams(max_new_tokens=20, temperature=0.0)
    )
    assert texts == [c.text for c in local]
    assert any(texts)


def test_wrong_key_is_401_and_health_needs_none(deployed: str) -> None:
    bad = OpenAI(base_url=f"{deployed}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        bad.models.list()
    assert info.value.status_code == 401
    assert info.value.body["code"] == "invalid_api_key"
    assert httpx.get(f"{deployed}/health").status_code == 200
    assert httpx.get(f"{deployed}/v1/models").status_code == 401  # no key at all


def test_oversize_and_over_limit_requests_are_400(client: OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt="x" * 30_000, max_tokens=4)
    assert "limit" in info.value.message and info.value.body["code"] == "request_too_large"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt="1+1=", max_tokens=100_000)
    assert "max_tokens" in info.value.message
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=model, messages=CHAT, temperature=7)


def test_unknown_model_and_route_get_openai_errors(
    client: OpenAI, deployed: str, api_key: str
) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="nope", messages=CHAT, max_tokens=2)
    assert "served models" in info.value.message
    r = httpx.post(
        f"{deployed}/v1/completions",
        content=b"{not json",
        headers={"Authorization": f"Bearer {api_key}"},
    )
    body = r.json()
    assert r.status_code == 400 and set(body["error"]) >= {"message", "type", "code"}
    assert "Traceback" not in r.text
    r = httpx.get(f"{deployed}/v2/nothing", headers={"Authorization": f"Bearer {api_key}"})
    assert r.status_code == 404 and "error" in r.json()


def test_flood_beyond_the_queue_gets_429_with_retry_after(
    deployed: str, model: str, api_key: str
) -> None:
    body = {"model": model, "prompt": "1+1=", "max_tokens": 64, "temperature": 1.0}

    async def flood() -> list[httpx.Response]:
        headers = {"Authorization": f"Bearer {api_key}"}
        limits = httpx.Limits(max_connections=32)
        async with httpx.AsyncClient(headers=headers, timeout=60, limits=limits) as http:
            calls = [http.post(f"{deployed}/v1/completions", json=body) for _ in range(24)]
            return list(await asyncio.gather(*calls))

    results = asyncio.run(flood())
    codes = sorted(r.status_code for r in results)
    assert 200 in codes and 429 in codes, codes  # the server holds at most 4 requests
    assert set(codes) == {200, 429}
    refused = next(r for r in results if r.status_code == 429)
    assert refused.headers["retry-after"] == "1"
    assert json.loads(refused.text)["error"]["code"] == "rate_limit_exceeded"


def test_seeded_sampling_repeats_and_top_p_is_honoured(client: OpenAI, model: str) -> None:
    def ask(seed: int, top_p: float = 1.0) -> str:
        r = client.completions.create(
            model=model, prompt="3+4=", max_tokens=16, temperature=1.0, seed=seed, top_p=top_p
        )
        return r.choices[0].text

    assert ask(7) == ask(7)
    greedy = client.completions.create(model=model, prompt="3+4=", max_tokens=16, temperature=0)
    assert ask(1, top_p=1e-6) == ask(2, top_p=1e-6) == greedy.choices[0].text  # only the top token

"""Token in, token out over real HTTP on the tiny model: vLLM's `/tokenize` and `/detokenize`,
and prime-rl's `/v1/chat/completions/tokens`, the routes verifiers' token client stitches
multi-turn prompts with (tests/envs/test_verifiers.py runs that client against them).

Traffic goes only to 127.0.0.1, to the server the fixture starts and stops.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from arena_core.models import load_policy
from arena_core.serve.server import serve_policy
from tests.serve.tool_schemas import ADD

ASK = [{"role": "user", "content": "What is 12+30?"}]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with serve_policy(policy, name="tiny") as srv, httpx.Client(base_url=srv.url, timeout=60) as c:
        yield c


def _chat(http: httpx.Client, path: str = "/v1/chat/completions", **body) -> dict:
    body = {"model": "tiny", "max_tokens": 12, "temperature": 0, "return_token_ids": True, **body}
    reply = http.post(path, json=body)
    assert reply.status_code == 200, reply.text
    return reply.json()


def _tokenize(http: httpx.Client, **body) -> list[int]:
    reply = http.post("/tokenize", json={"model": "tiny", **body})
    assert reply.status_code == 200, reply.text
    out = reply.json()
    assert out["count"] == len(out["tokens"]) and out["max_model_len"] == 1024
    return out["tokens"]


def test_tokenize_renders_messages_as_the_chat_route_does(http: httpx.Client) -> None:
    """The ids `/tokenize` returns for a conversation are the prompt the chat route decodes
    from, plain or with tools and tool turns; a turn rendered as finished is their prefix."""
    plain = _chat(http, messages=ASK)
    assert _tokenize(http, messages=ASK) == plain["prompt_token_ids"]
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": '{"a":1}'}}
    turns = [
        *ASK,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    with_tools = _chat(http, messages=turns, tools=TOOLS)
    assert _tokenize(http, messages=turns, tools=TOOLS) == with_tools["prompt_token_ids"]
    answered = [*ASK, {"role": "assistant", "content": "42"}]
    finished = _tokenize(http, messages=answered, add_generation_prompt=False)
    opened = _tokenize(http, messages=answered)
    assert opened[: len(finished)] == finished and len(opened) > len(finished)

    ids = _tokenize(http, prompt="12+30=", return_token_strs=False)
    back = http.post("/detokenize", json={"model": "tiny", "tokens": ids}).json()
    assert back == {"prompt": "12+30="}
    strs = http.post("/tokenize", json={"prompt": "12", "return_token_strs": True}).json()
    assert "".join(strs["token_strs"]) == "12"


def test_a_prompt_given_as_ids_is_answered_as_its_conversation(http: httpx.Client) -> None:
    """`/v1/chat/completions/tokens` with a conversation's ids answers what the chat route
    answers for it; a second turn stitched from the first turn's ids (EOS included) and the
    new message's tokens keeps those ids exactly, as a token-in-token-out client needs."""
    first = _chat(http, messages=ASK)
    same = _chat(
        http, "/v1/chat/completions/tokens", messages=ASK, tokens=first["prompt_token_ids"]
    )
    assert same["choices"][0]["token_ids"] == first["choices"][0]["token_ids"]
    assert same["choices"][0]["message"] == first["choices"][0]["message"]

    sampled = first["prompt_token_ids"] + first["choices"][0]["token_ids"]
    assert first["choices"][0]["finish_reason"] == "stop"  # the answer ends with its EOS id
    eos = http.post("/detokenize", json={"tokens": sampled[-1:]}).json()["prompt"]
    assert eos == "<|im_end|>"
    reply = {"role": "assistant", "content": first["choices"][0]["message"]["content"]}
    hint = {"role": "user", "content": "Check it."}
    dummy = {"role": "assistant", "content": "x"}
    full = _tokenize(http, messages=[dummy, hint])
    base = _tokenize(http, messages=[dummy], add_generation_prompt=False)
    stop = sampled[-1]
    gap = len(base) - 1 - max(i for i, t in enumerate(base) if t == stop)
    stitched = sampled + full[len(base) - gap :]
    second = _chat(
        http, "/v1/chat/completions/tokens", messages=[*ASK, reply, hint], tokens=stitched
    )
    assert second["prompt_token_ids"] == stitched
    assert second["prompt_token_ids"][: len(sampled)] == sampled
    assert second["usage"]["prompt_tokens"] == len(stitched)


@pytest.mark.parametrize(
    ("path", "body", "param", "says"),
    [
        (
            "/v1/chat/completions/tokens",
            {"messages": ASK, "tokens": [10**6]},
            "tokens",
            "vocabulary",
        ),  # fmt: skip
        ("/v1/chat/completions/tokens", {"messages": ASK}, "tokens", "Field required"),
        ("/v1/chat/completions/tokens", {"messages": ASK, "tokens": []}, "tokens", "at least 1"),
        ("/tokenize", {"prompt": "a", "messages": ASK}, "body", "either prompt or messages"),
        (
            "/tokenize",
            {"messages": ASK, "chat_template_kwargs": {"enable_thinking": True}},
            "body",
            "chat_template_kwargs",
        ),  # fmt: skip
        ("/detokenize", {"tokens": [-1]}, "tokens", "vocabulary"),
    ],
)
def test_bad_token_requests_are_a_400_naming_the_field(
    http: httpx.Client, path: str, body: dict, param: str, says: str
) -> None:
    reply = http.post(path, json={"model": "tiny", **body})
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["param"] == param and says in error["message"]

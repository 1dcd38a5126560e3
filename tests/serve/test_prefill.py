"""vLLM's `continue_final_message`, `add_generation_prompt` and chat `echo` on the chat route
and `/tokenize`, with the official `openai` client against a server over the embedded tiny model:
the last message is left open and the answer continues it in its role, as a completion of the
same ids does; the prompt is the model's template rendered so; `echo` returns the continued
message first; what vLLM refuses is refused by name. (Checked by hand against vLLM's own server
on one model: the same prompt ids, reply ids and roles in every combination.)

Traffic goes only to 127.0.0.1, to the server conftest.py's `server` fixture starts and stops.
"""

from __future__ import annotations

import httpx
import openai
import pytest
from openai import OpenAI

PREFILL = [
    {"role": "user", "content": "What is 12+30?"},
    {"role": "assistant", "content": "<think>12+30"},
]


def _template(messages: list[dict], **turn: bool) -> list[int]:
    from arena_core.models import load_policy

    tokenizer = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}}).tokenizer
    text = tokenizer.apply_chat_template(messages, tokenize=False, **turn)
    return tokenizer.encode(text, add_special_tokens=False)


def test_the_answer_continues_the_assistants_open_message(client: OpenAI, server: str) -> None:
    cont = {"continue_final_message": True, "add_generation_prompt": False}
    chat = client.chat.completions.create(
        model="tiny", messages=PREFILL, max_tokens=12, temperature=0,
        extra_body={**cont, "return_token_ids": True},
    ).model_dump()  # fmt: skip
    prompt = chat["prompt_token_ids"]
    assert prompt == _template(PREFILL, **cont)
    assert prompt != _template(PREFILL, add_generation_prompt=True)
    same = client.completions.create(model="tiny", prompt=prompt, max_tokens=12, temperature=0)
    assert chat["choices"][0]["message"]["content"] == same.choices[0].text
    tokenized = httpx.post(
        f"{server}/tokenize", json={"model": "tiny", "messages": PREFILL, **cont}
    )
    assert tokenized.json()["tokens"] == prompt

    closed = client.chat.completions.create(
        model="tiny", messages=PREFILL, max_tokens=1,
        extra_body={"add_generation_prompt": False, "return_token_ids": True},
    ).model_dump()  # fmt: skip
    assert closed["prompt_token_ids"] == _template(PREFILL, add_generation_prompt=False)


def test_what_vllm_refuses_is_refused_by_name(client: OpenAI, server: str) -> None:
    both = {"continue_final_message": True, "add_generation_prompt": True}
    says = "send add_generation_prompt: false"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny", messages=PREFILL, max_tokens=1, extra_body=both
        )
    assert info.value.body["param"] == "continue_final_message" and says in info.value.message
    tokenized = httpx.post(f"{server}/tokenize", json={"messages": PREFILL, **both})
    assert tokenized.status_code == 400 and says in tokenized.json()["error"]["message"]


def test_a_continued_message_keeps_its_role(client: OpenAI) -> None:
    """vLLM's rule: without an assistant turn opened, the reply is in the last message's role,
    a user's message continued too, and `echo` returns that message first."""
    cont = {"continue_final_message": True, "add_generation_prompt": False, "echo": True}
    question = PREFILL[:1]
    got = client.chat.completions.create(
        model="tiny", messages=question, max_tokens=6, temperature=0,
        extra_body={**cont, "return_token_ids": True},
    ).model_dump()  # fmt: skip
    assert got["prompt_token_ids"] == _template(question, continue_final_message=True)
    reply = got["choices"][0]["message"]
    assert reply["role"] == "user" and reply["content"].startswith(question[0]["content"])


def test_echo_starts_the_answer_with_the_message_it_continues(client: OpenAI) -> None:
    """vLLM's chat `echo`: the last message, when it is the reply's role (the assistant's here),
    comes back before the answer, streamed (in the first delta) or not; after a user message
    answered by the assistant it adds nothing."""
    cont = {"continue_final_message": True, "add_generation_prompt": False}
    ask = dict(model="tiny", messages=PREFILL, max_tokens=12, temperature=0)
    bare = client.chat.completions.create(**ask, extra_body=cont).choices[0].message.content
    echoed = client.chat.completions.create(**ask, extra_body={**cont, "echo": True})
    assert echoed.choices[0].message.content == PREFILL[-1]["content"] + bare
    stream = client.chat.completions.create(**ask, stream=True, extra_body={**cont, "echo": True})
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert pieces[0] == PREFILL[-1]["content"] and "".join(pieces) == PREFILL[-1]["content"] + bare
    question = dict(model="tiny", messages=PREFILL[:1], max_tokens=8, temperature=0)
    plain = client.chat.completions.create(**question).choices[0].message.content
    again = client.chat.completions.create(**question, extra_body={"echo": True})
    assert again.choices[0].message.content == plain

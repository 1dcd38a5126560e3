"""Tools and structured output, with the official `openai` client (and langchain-openai when
installed) against a server over the embedded tiny model: forced tool calls and JSON schemas are
enforced by constrained decoding (llguidance), so even a 3M-parameter model answers with calls
and JSON that validate. Traffic goes only to 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI
from pydantic import BaseModel, Field

from arena_core.models import load_policy
from arena_core.serve.answer_extras import ToolStream
from arena_core.serve.chat import read_tool_calls, render_chat
from arena_core.serve.protocol import ChatRequest
from arena_core.serve.server import serve_policy
from tests.serve.tool_schemas import ASK, SCHEMAS, TOOLS, Answer

pytest.importorskip("llguidance")
jsonschema = pytest.importorskip("jsonschema")  # the reference validator of the schemas


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


def _check_call(call) -> None:
    assert call.type == "function" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])


# -- tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_tool_choice_required_always_gives_a_valid_call(client: OpenAI, temperature) -> None:
    r = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=150,
        temperature=temperature,
        seed=7,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1 and choice.message.content is None
    _check_call(choice.message.tool_calls[0])


def test_a_named_tool_choice_calls_that_function(client: OpenAI) -> None:
    for name in ("add", "echo"):
        r = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            max_tokens=150,
            temperature=1.0,
            seed=3,
            tool_choice={"type": "function", "function": {"name": name}},
        )
        call = r.choices[0].message.tool_calls[0]
        assert call.function.name == name
        _check_call(call)


def test_streamed_tool_calls_come_as_openai_delta_chunks(client: OpenAI) -> None:
    kw = dict(model="tiny", messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=150)
    full = client.chat.completions.create(**kw, temperature=0)
    chunks = list(client.chat.completions.create(**kw, temperature=0, stream=True))
    deltas = [d for c in chunks if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    assert deltas[0].id and deltas[0].type == "function" and deltas[0].function.name
    assert deltas[0].function.arguments == ""  # name first, arguments after, as OpenAI streams
    arguments = "".join(d.function.arguments or "" for d in deltas if d.index == 0)
    expected = full.choices[0].message.tool_calls[0].function
    assert deltas[0].function.name == expected.name and json.loads(arguments) == json.loads(
        expected.arguments
    )
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)  # no call as text


def test_tool_choice_auto_and_none_answer_in_text_when_no_call_is_made(client: OpenAI) -> None:
    for choice in ("auto", "none"):
        r = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice=choice,
            max_tokens=20,
            temperature=0,
        )
        assert r.choices[0].message.tool_calls is None and r.choices[0].message.content
        assert r.choices[0].finish_reason in ("stop", "length")


def test_calls_in_free_text_are_read_by_arenas_parser() -> None:
    """tool_choice auto: what the model writes is read with the Hermes parser of training."""
    text = 'Let me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 4}}\n</tool_call>'
    reply = read_tool_calls(text, TOOLS)
    assert reply.content == "Let me add."
    assert [json.loads(c["function"]["arguments"]) for c in reply.calls] == [{"a": 4}]
    assert (
        read_tool_calls('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', TOOLS).calls
        == []
    )
    two = text + '<tool_call>{"name": "echo", "arguments": {"t": "x"}}</tool_call>'
    assert len(read_tool_calls(two, TOOLS).calls) == 2
    assert len(read_tool_calls(two, TOOLS, parallel=False).calls) == 1
    stream = ToolStream(TOOLS)  # streamed: content goes out until a call may begin
    sent = "".join(
        stream.feed(piece) for piece in ["Let me ", "add.\n<tool", "_call>\n{", text[25:]]
    )
    assert sent == "Let me add.\n"
    content, calls = stream.end()
    assert content == "" and calls[0]["function"]["name"] == "add"


def test_follow_up_turns_with_tool_calls_and_results_render(client: OpenAI, policy) -> None:
    history = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "add", "arguments": '{"a": 5}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    r = client.chat.completions.create(
        model="tiny",
        messages=history,
        tools=TOOLS,
        max_tokens=8,
        temperature=0,
        extra_body={"return_token_ids": True},
    )
    prompt = policy.tokenizer.decode(r.prompt_token_ids)
    # the tiny model's ChatML template has no tools: the Hermes fallback of docs/serving.md,
    # the tool's answer a tool turn of the template, as training's tool episodes write it
    assert '<tools>\n{"type": "function", "function": {"name": "add"' in prompt
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 5}}\n</tool_call>' in prompt
    assert prompt.endswith("<|im_start|>tool\n5<|im_end|>\n<|im_start|>assistant\n")


def test_a_tool_answer_is_served_as_training_rendered_it(policy) -> None:
    """A model Arena trained with tools read each tool answer as the tokens its tool episodes
    appended after its call (`ToolRenderer.tool_delta`); the server ends a conversation holding
    that answer with the same tokens, so the deployed model reads it as it learned to."""
    from arena_core.engines.multi_turn import ToolRenderer

    tok = policy.tokenizer
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 5}}\n</tool_call>'
    history = [
        {"role": "user", "content": "add 5"},
        {"role": "assistant", "content": call},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    trained = ToolRenderer(tok, None).tool_delta([{"role": "tool", "content": "5"}])
    served = render_chat(tok, ChatRequest(model="tiny", messages=history).messages, TOOLS)
    assert served[-len(trained) :] == trained, tok.decode(served[-len(trained) :])


def test_a_template_without_a_tool_role_gets_the_answer_as_a_user_turn(policy) -> None:
    """A template that drops roles it does not know would lose the tool's answer: the server
    writes it as a user turn holding `<tool_response>` instead."""
    import copy

    tok = copy.deepcopy(policy.tokenizer)
    tok.chat_template = (
        "{% for m in messages %}{% if m.role in ['system', 'user', 'assistant'] %}"
        "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    history = [
        {"role": "user", "content": "add 5"},
        {"role": "assistant", "content": "calling"},
        {"role": "tool", "tool_call_id": "call_1", "content": "5"},
    ]
    served = tok.decode(
        render_chat(tok, ChatRequest(model="tiny", messages=history).messages, TOOLS)
    )
    assert "<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>" in served


def test_a_template_with_its_own_tool_format_gets_the_tools(policy) -> None:
    """A template that renders `tools` (as Qwen's does) is used as it is, no fallback."""
    tok = policy.tokenizer
    own = (
        "{% if tools %}TOOLS:{% for t in tools %}{{ t.function.name }};{% endfor %}|{% endif %}"
        "{% for m in messages %}{{ m.role }}:{% if m.tool_calls %}"
        "{% for c in m.tool_calls %}CALL {{ c.function.name }}({{ c.function.arguments.a }}){% endfor %}"
        "{% else %}{{ m.content }}{% endif %}|{% endfor %}assistant:"
    )
    saved, tok.chat_template = tok.chat_template, own
    try:
        req = ChatRequest.model_validate(
            {
                "messages": ASK
                + [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "add", "arguments": '{"a": 5}'},
                            }
                        ],
                    },
                    {"role": "tool", "tool_call_id": "c", "content": "5"},
                ]
            }
        )
        text = tok.decode(render_chat(tok, req.messages, TOOLS))
    finally:
        tok.chat_template = saved
    assert text == "TOOLS:add;echo;|user:What is 2+3?|assistant:CALL add(5)|tool:5|assistant:"


def test_bad_tools_are_400s_naming_the_tool(client: OpenAI) -> None:
    bad = [
        {
            "type": "function",
            "function": {
                "name": "broken",
                "parameters": {"type": "object", "properties": {"x": {"type": "nope"}}},
            },
        }
    ]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=ASK, tools=TOOLS + bad)
    assert (
        "'broken'" in info.value.message
        and info.value.body["param"] == "tools.2.function.parameters"
    )
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "mul"}},
        )
    assert "'mul'" in info.value.message and info.value.body["param"] == "tool_choice"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=ASK, tool_choice="required")
    assert "tool_choice needs tools" in info.value.message


# -- structured output -------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_parse_with_a_pydantic_schema_always_validates(client: OpenAI, temperature) -> None:
    r = client.chat.completions.parse(
        model="tiny",
        messages=ASK,
        response_format=Answer,
        max_tokens=100,
        temperature=temperature,
        seed=11,
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(r.choices[0].message.parsed, Answer)


def test_json_object_answers_are_json_objects(client: OpenAI) -> None:
    finished = 0
    for seed in range(4):
        r = client.chat.completions.create(
            model="tiny",
            messages=ASK,
            response_format={"type": "json_object"},
            max_tokens=60,
            temperature=1.0,
            seed=seed,
        )
        text = r.choices[0].message.content
        if r.choices[0].finish_reason == "stop":
            finished += 1
            assert isinstance(json.loads(text), dict)
        else:  # cut by max_tokens: what came is the start of an object
            assert r.choices[0].finish_reason == "length" and text.startswith("{")
    assert finished >= 1


def test_streamed_json_schema_answer_is_the_same_json(client: OpenAI) -> None:
    schema = Answer.model_json_schema() | {"additionalProperties": False}  # strict, as OpenAI's
    fmt = {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    full = client.chat.completions.create(
        model="tiny", messages=ASK, response_format=fmt, max_tokens=100, temperature=0
    )
    chunks = client.chat.completions.create(
        model="tiny", messages=ASK, response_format=fmt, max_tokens=100, temperature=0, stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    Answer.model_validate_json(text)


def test_max_tokens_before_the_json_closes_is_length(client: OpenAI) -> None:
    with pytest.raises(openai.LengthFinishReasonError):
        client.chat.completions.parse(
            model="tiny", messages=ASK, response_format=Answer, max_tokens=5, temperature=0
        )


def test_a_schema_the_library_cannot_compile_is_a_400_with_its_message(client: OpenAI) -> None:
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}},
        },
    }
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="tiny", messages=ASK, response_format=fmt)
    assert "missing" in info.value.message and info.value.body["code"] == "invalid_json_schema"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny", messages=ASK, response_format={"type": "json_schema"}
        )
    assert info.value.body["param"] == "response_format"


# -- langchain-openai (the acceptance, when installed) --------------------------------


class AddTool(BaseModel):
    """Add a number."""

    a: int = Field(ge=0, le=9)


def test_langchain_bind_tools_and_with_structured_output(server: str) -> None:
    lc = pytest.importorskip("langchain_openai")
    llm = lc.ChatOpenAI(
        base_url=f"{server}/v1",
        api_key="none",
        model="tiny",
        max_tokens=150,
        temperature=0,
        max_retries=0,
    )
    # strict=True: langchain closes the schemas (additionalProperties false), as OpenAI needs
    msg = llm.bind_tools([AddTool], tool_choice="required", strict=True).invoke("What is 2+3?")
    assert msg.tool_calls and msg.tool_calls[0]["name"] == "AddTool"
    assert 0 <= msg.tool_calls[0]["args"]["a"] <= 9
    for method in ("json_schema", "function_calling"):
        out = llm.with_structured_output(Answer, method=method, strict=True).invoke("What is 2+3?")
        assert isinstance(out, Answer), method
    bound = llm.bind_tools([AddTool], tool_choice="AddTool", strict=True)
    chunks = list(bound.stream("What is 2+3?"))
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.tool_calls[0]["name"] == "AddTool"


def test_logprobs_under_a_grammar_are_those_of_the_masked_distribution(client: OpenAI) -> None:
    """A forced call's first token is forced (`<` of `<tool_call>` on the byte-level tiny
    tokenizer): probability 1 under the distribution sampled from, so logprob 0 and no
    alternative; the rest are the top entries of the masked distribution."""
    r = client.chat.completions.create(
        model="tiny",
        messages=ASK,
        tools=TOOLS,
        tool_choice="required",
        max_tokens=150,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        extra_body={"return_token_ids": True},
    )
    content = r.choices[0].logprobs.content
    assert content[0].token == "<" and content[0].logprob == pytest.approx(0.0, abs=1e-6)
    assert [t.token for t in content[0].top_logprobs] == ["<"]  # nothing else was possible
    assert len(content) == len(r.choices[0].token_ids)
    for entry in content:
        assert entry.top_logprobs[0].token == entry.token  # greedy within the grammar

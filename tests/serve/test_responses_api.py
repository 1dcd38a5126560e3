"""`POST /v1/responses` with the official `openai` client and OpenAI's Agents SDK, against a server
over the embedded tiny model: the Responses API answers what the chat route answers for the
same conversation, function calls go out and their outputs come back in, the stream rebuilds
the same Response, a stored response is continued by `previous_response_id` as if the whole
conversation had been sent and lists the items it was generated from, and what Arena does not do
is refused by name.

Traffic goes only to 127.0.0.1, to the server conftest.py's `server` fixture starts and stops.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import jsonschema
import openai
import pytest
from openai import OpenAI
from pydantic import Field

from arena_core.models import load_policy
from arena_core.serve.protocol import Limits
from arena_core.serve.server import serve_policy
from tests.serve.tool_schemas import ADD

QUESTION = "What is 12+30?"
TOOLS = [{"type": "function", "name": "add", "description": "add", "parameters": ADD}]
# a request whose answer must call `add` (greedy, room for the call)
FORCED_CALL = dict(
    model="tiny",
    input=QUESTION,
    tools=TOOLS,
    tool_choice="required",
    max_output_tokens=64,
    temperature=0,
)
CHAT_TOOLS = [{"type": "function", "function": {"name": "add", "parameters": ADD}}]


def test_a_response_answers_what_the_chat_route_answers(client: OpenAI) -> None:
    """Greedy: the same conversation gives the same text and token counts on both routes;
    `instructions` is the system message."""
    chat = client.chat.completions.create(
        model="tiny",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": QUESTION},
        ],
        max_tokens=24,
        temperature=0,
    )
    response = client.responses.create(
        model="tiny", instructions="Be brief.", input=QUESTION, max_output_tokens=24, temperature=0
    )
    assert response.object == "response" and response.model == "tiny"
    assert response.output_text == chat.choices[0].message.content
    assert [item.type for item in response.output] == ["message"]
    assert response.usage.input_tokens == chat.usage.prompt_tokens
    assert response.usage.output_tokens == chat.usage.completion_tokens
    # the input as message items with text parts: the same answer again
    items = [{"role": "developer", "content": [{"type": "input_text", "text": "Be brief."}]}]
    items.append({"type": "message", "role": "user", "content": QUESTION})
    again = client.responses.create(model="tiny", input=items, max_output_tokens=24, temperature=0)
    assert again.output_text == response.output_text

    cut = client.responses.create(model="tiny", input=QUESTION, max_output_tokens=2)
    assert cut.status == "incomplete" and cut.incomplete_details.reason == "max_output_tokens"


def test_a_function_call_goes_out_and_its_output_comes_back(client: OpenAI) -> None:
    """A forced call validates against its tool's schema; sent back with its output, the
    conversation is answered as the chat route answers the same tool turns."""
    first = client.responses.create(**FORCED_CALL)
    calls = [item for item in first.output if item.type == "function_call"]
    assert first.status == "completed" and len(calls) == 1 and calls[0].name == "add"
    jsonschema.validate(json.loads(calls[0].arguments), ADD)
    named = client.responses.create(
        model="tiny",
        input=QUESTION,
        tools=TOOLS,
        tool_choice={"type": "function", "name": "add"},
        max_output_tokens=64,
        temperature=0,
    )
    assert [item.type for item in named.output] == ["function_call"]

    call = calls[0]
    history = [{"role": "user", "content": QUESTION}]
    history += [item.model_dump(exclude_none=True) for item in first.output]
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "42"})
    answer = client.responses.create(
        model="tiny", input=history, tools=TOOLS, max_output_tokens=24, temperature=0
    )
    tool_call = {"name": "add", "arguments": call.arguments}
    chat = client.chat.completions.create(
        model="tiny",
        messages=[
            {"role": "user", "content": QUESTION},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": call.call_id, "type": "function", "function": tool_call}],
            },
            {"role": "tool", "tool_call_id": call.call_id, "content": "42"},
        ],
        tools=CHAT_TOOLS,
        max_tokens=24,
        temperature=0,
    )
    assert answer.output_text == (chat.choices[0].message.content or "")


def test_the_stream_rebuilds_the_response(client: OpenAI) -> None:
    """The SDK's stream helper accumulates the events into the Response a plain call returns:
    text deltas into the message, a call's arguments into its item."""
    plain = client.responses.create(
        model="tiny", input=QUESTION, max_output_tokens=24, temperature=0
    )
    with client.responses.stream(
        model="tiny", input=QUESTION, max_output_tokens=24, temperature=0
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-1] == "response.completed" and "response.output_text.delta" in kinds
    assert final.output_text == plain.output_text
    assert final.usage.output_tokens == plain.usage.output_tokens

    with client.responses.stream(**FORCED_CALL) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.done" in kinds
    (call,) = [item for item in final.output if item.type == "function_call"]
    jsonschema.validate(json.loads(call.arguments), ADD)


def test_a_json_schema_format_and_logprobs(client: OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {"x": {"type": "integer", "minimum": 0, "maximum": 99}},
        "required": ["x"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}
    response = client.responses.create(
        model="tiny", input=QUESTION, text={"format": fmt}, max_output_tokens=32, temperature=0
    )
    jsonschema.validate(json.loads(response.output_text), schema)

    probed = client.responses.create(
        model="tiny",
        input=QUESTION,
        max_output_tokens=6,
        temperature=0,
        include=["message.output_text.logprobs"],
        top_logprobs=2,
    )
    logprobs = probed.output[0].content[0].logprobs
    chat = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": QUESTION}],
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    expected = chat.choices[0].logprobs.content
    assert [(p.token, p.logprob) for p in logprobs] == [(p.token, p.logprob) for p in expected]
    assert all(len(p.top_logprobs) == 2 for p in logprobs)


@pytest.mark.parametrize(
    ("extra", "param", "says"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "no response 'resp_1'"),
        ({"tools": [{"type": "web_search"}]}, "tools", "function tools only"),
        ({"include": ["reasoning.encrypted_content"]}, "include", "returns no reasoning"),
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type", "'reasoning'"),
        ({"input": ["hi", 5]}, "input.0", "an input item is a JSON object"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "input.0.content.0",
            "text parts",
        ),  # fmt: skip
        ({"max_output_tokens": 4000}, "max_output_tokens", "max_output_tokens=4000 is above"),
        ({"text": {"format": {"type": "json_schema"}}}, "text.format", "needs a name and a schema"),
    ],
)
def test_what_arena_does_not_do_is_refused_by_name(
    client: OpenAI, extra: dict, param: str, says: str
) -> None:
    body = {"model": "tiny", "input": "hi", "max_output_tokens": 4, **extra}
    with pytest.raises(openai.BadRequestError) as info:
        client.post("/responses", body=body, cast_to=object)
    assert info.value.body["param"] == param and says in info.value.message


def _calc_agent(agents, server: str, seen: list[int]):  # noqa: ANN001, ANN202 - the SDK module
    """An agent whose model must call `add_ten` (which records its argument in `seen`) first,
    then answers; its model is Arena's Responses API at `server`."""
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)

    @agents.function_tool
    def add_ten(a: Annotated[int, Field(ge=0, le=99)]) -> int:
        """Add ten to a."""
        seen.append(a)
        return a + 10

    client = AsyncOpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)
    return agents.Agent(
        name="calc",
        instructions="Use the add_ten tool.",
        tools=[add_ten],
        model=agents.OpenAIResponsesModel(model="tiny", openai_client=client),
        model_settings=agents.ModelSettings(tool_choice="required", temperature=0, max_tokens=150),
    )


def test_an_agents_sdk_agent_calls_its_tool_and_answers(server: str) -> None:
    """OpenAI's Agents SDK runs its whole loop on Arena's Responses API: the model's forced
    call reaches the Python function, its result goes back, and the model's answer ends the
    run (its tool choice resets to auto after the call); streamed the same way."""
    agents = pytest.importorskip("agents")
    seen: list[int] = []
    agent = _calc_agent(agents, server, seen)

    async def run() -> tuple[object, object, set[str]]:
        done = await agents.Runner.run(agent, "What is 5 plus ten?", max_turns=4)
        streamed = agents.Runner.run_streamed(agent, "What is 7 plus ten?", max_turns=4)
        kinds = {event.type async for event in streamed.stream_events()}
        return done, streamed, kinds

    done, streamed, kinds = asyncio.run(run())
    assert len(seen) == 2 and all(0 <= a <= 99 for a in seen)
    assert [type(item).__name__ for item in done.new_items] == [
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
    ]
    assert isinstance(done.final_output, str) and done.final_output
    assert isinstance(streamed.final_output, str) and "raw_response_event" in kinds


# -- stored responses ----------------------------------------------------------------------------


def test_previous_response_id_answers_as_the_whole_conversation_would(client: OpenAI) -> None:
    """Each response is stored (OpenAI's default); continuing one by its id is answered as the
    whole conversation sent as input is, through a function call and its output, streamed or
    not; instructions are not carried over (OpenAI's rule)."""
    first = client.responses.create(**FORCED_CALL, instructions="Call add.")
    assert first.store is True and first.previous_response_id is None
    call = next(item for item in first.output if item.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    chained = client.responses.create(
        model="tiny", input=[output], previous_response_id=first.id, tools=TOOLS,
        max_output_tokens=24, temperature=0,
    )  # fmt: skip
    history = [{"role": "user", "content": QUESTION}]
    history += [item.model_dump(exclude_none=True) for item in first.output] + [output]
    whole = client.responses.create(
        model="tiny", input=history, tools=TOOLS, max_output_tokens=24, temperature=0,
        store=False,
    )  # fmt: skip
    assert chained.previous_response_id == first.id
    assert chained.output_text == whole.output_text
    assert chained.usage.input_tokens == whole.usage.input_tokens

    ask = {"role": "user", "content": "And 2+2?"}
    with client.responses.stream(
        model="tiny", input=[ask], previous_response_id=chained.id, max_output_tokens=64,
        temperature=0,
    ) as stream:  # fmt: skip
        streamed = stream.get_final_response()
    history += [item.model_dump(exclude_none=True) for item in chained.output] + [ask]
    again = client.responses.create(
        model="tiny", input=history, max_output_tokens=64, temperature=0, store=False
    )
    assert streamed.status == "completed" and streamed.output_text == again.output_text
    assert client.responses.retrieve(streamed.id).output_text == streamed.output_text


def test_a_stored_response_is_read_back_and_deleted(client: OpenAI) -> None:
    kept = client.responses.create(model="tiny", input=QUESTION, max_output_tokens=8)
    read = client.responses.retrieve(kept.id)
    assert read.model_dump() == kept.model_dump()
    client.responses.delete(kept.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.retrieve(kept.id)
    assert info.value.body["param"] == "response_id"
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="tiny", input="hi", previous_response_id=kept.id)
    assert info.value.body["code"] == "previous_response_not_found"
    unkept = client.responses.create(model="tiny", input=QUESTION, max_output_tokens=8, store=False)
    assert unkept.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unkept.id)


def test_the_store_keeps_the_last_responses_used_and_can_be_off() -> None:
    """`--stored-responses N`: the N responses stored or read last; 0 stores none, and then
    `store: true` is refused by name while `store: false` is answered."""
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with serve_policy(policy, name="tiny", limits=Limits(stored_responses=2)) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        a, b = (client.responses.create(model="tiny", input=q, max_output_tokens=4) for q in "ab")
        client.responses.retrieve(a.id)  # read: `a` is now the last used, `b` the oldest
        client.responses.create(model="tiny", input="c", max_output_tokens=4)
        client.responses.retrieve(a.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(b.id)
    with serve_policy(policy, name="tiny", limits=Limits(stored_responses=0)) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.create(model="tiny", input="hi", max_output_tokens=4)
        assert info.value.body["param"] == "store" and "--stored-responses 0" in info.value.message
        ok = client.responses.create(model="tiny", input="hi", max_output_tokens=4, store=False)
        assert ok.status in ("completed", "incomplete")


def test_an_agents_sdk_run_chains_its_turns_on_the_server(server: str) -> None:
    """The Agents SDK's `auto_previous_response_id`: after the first turn it sends only the new
    items (the tool's output) with the previous response's id, and the run still ends with
    the model's answer after the call."""
    agents = pytest.importorskip("agents")
    agent = _calc_agent(agents, server, [])
    done = asyncio.run(
        agents.Runner.run(agent, "What is 5 plus ten?", max_turns=4, auto_previous_response_id=True)
    )
    assert [type(item).__name__ for item in done.new_items] == [
        "ToolCallItem",
        "ToolCallOutputItem",
        "MessageOutputItem",
    ]
    sync = OpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)
    last = sync.responses.retrieve(done.last_response_id)
    first = sync.responses.retrieve(last.previous_response_id)  # the turn that made the call
    assert [item.type for item in first.output] == ["function_call"]
    assert last.output_text == done.final_output


def test_input_items_list_what_a_chained_response_was_generated_from(client: OpenAI) -> None:
    """`responses.input_items.list`: the items a response was generated from, its chain's before
    its own, as the SDK's own item types, newest first by default; the SDK pages through them
    by `after`; an item keeps its id down the chain; bad paging is a 400 naming the field."""
    from openai.types.responses import (
        ResponseFunctionToolCallItem,
        ResponseInputMessageItem,
        ResponseOutputMessage,
    )

    first = client.responses.create(**FORCED_CALL)
    call = next(item for item in first.output if item.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    ask = {"role": "user", "content": [{"type": "input_text", "text": "And 2+2?"}]}
    second = client.responses.create(
        model="tiny", input=[output, ask], previous_response_id=first.id, tools=TOOLS,
        max_output_tokens=8, temperature=0,
    )  # fmt: skip
    mine = list(client.responses.input_items.list(second.id, order="asc", limit=2))  # 3 pages
    assert [i.type for i in mine] == ["message"] + [o.type for o in first.output] + [
        "function_call_output",
        "message",
    ]
    assert isinstance(mine[0], ResponseInputMessageItem)
    assert mine[0].role == "user" and mine[0].content[0].text == QUESTION
    assert [i.id for i in mine[1 : 1 + len(first.output)]] == [o.id for o in first.output]
    fc = next(i for i in mine if i.type == "function_call")
    assert isinstance(fc, ResponseFunctionToolCallItem) and fc.call_id == call.call_id
    assert mine[-2].call_id == call.call_id and mine[-2].output == "42"
    assert mine[-1].content[0].text == "And 2+2?"
    assert not any(isinstance(i, ResponseOutputMessage) and i.role != "assistant" for i in mine)
    newest = client.responses.input_items.list(second.id)  # desc, 20: one page
    assert [i.id for i in newest.data] == [i.id for i in reversed(mine)]
    assert not newest.has_more and newest.first_id == mine[-1].id
    # the first response's items are its own input only, with the id they keep in the chain
    (own,) = client.responses.input_items.list(first.id).data
    assert own.id == mine[0].id
    for query, param in (({"limit": 0}, "limit"), ({"order": "up"}, "order"),
                         ({"after": "msg_nope"}, "after")):  # fmt: skip
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.input_items.list(second.id, **query)
        assert info.value.body["param"] == param
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_unknown")


def test_truncation_auto_answers_the_newest_turns_that_fit(client: OpenAI) -> None:
    """A conversation past the context: `truncation: "auto"` drops whole turns from the
    beginning, as few as make it fit, and answers as the turns it kept sent alone are answered
    (instructions kept); without it the request is a 400 naming the context."""
    turns: list[dict] = []
    for i in range(10):
        turns.append({"role": "user", "content": f"Question {i}: what is {i}+{i}? " * 4})
        turns.append({"role": "assistant", "content": f"<answer>{2 * i}</answer> " * 6})
    turns.append({"role": "user", "content": QUESTION})
    ask = dict(
        model="tiny", instructions="Answer.", max_output_tokens=32, temperature=0, store=False
    )
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(input=turns, **ask)
    assert "context of 1024 tokens" in info.value.message
    fitted = client.responses.create(input=turns, truncation="auto", **ask)
    assert fitted.truncation == "auto" and fitted.usage.input_tokens + 32 <= 1024

    def alone(start: int) -> object | None:
        try:
            return client.responses.create(input=turns[start:], **ask)
        except openai.BadRequestError:
            return None  # these turns do not fit either

    start = next(j for j in range(0, len(turns), 2) if alone(j) is not None)
    assert start > 0 and alone(start - 2) is None  # as few turns dropped as fit
    kept = alone(start)
    assert kept.usage.input_tokens == fitted.usage.input_tokens
    assert kept.output_text == fitted.output_text

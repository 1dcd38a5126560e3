"""OpenAI's Conversations API with the official `openai` client and OpenAI's Agents SDK, against a
server over the embedded tiny model: a conversation holds its items, a response that names it is
answered as the whole history sent as input would be and adds its input and output to it, its
items are listed, read and deleted by id, and what the API does not allow is refused by name.

Traffic goes only to 127.0.0.1, to the server conftest.py's `server` fixture starts and stops.
"""

from __future__ import annotations

import asyncio
import threading
import time

import openai
import pytest
from openai import OpenAI

from arena_core.models import load_policy
from arena_core.serve.batching import RequestBatcher
from arena_core.serve.protocol import Limits
from arena_core.serve.server import serve_policy
from tests.serve.test_responses_api import FORCED_CALL, QUESTION, TOOLS, _calc_agent


def _dumped(items: list) -> list[dict]:
    return [item.model_dump(exclude_none=True) for item in items]


def test_a_response_continues_a_conversation_and_adds_its_turn(client: OpenAI) -> None:
    """The conversation's items are the history a response answers, as if sent as input (a
    function call and its output too); its input and output are added in order, with the ids
    the response gave them; `conversation` may be the id or `{"id": ...}`."""
    conv = client.conversations.create(
        items=[{"type": "message", "role": "user", "content": QUESTION}], metadata={"k": "v"}
    )
    assert conv.object == "conversation" and conv.metadata == {"k": "v"}
    assert client.conversations.retrieve(conv.id).model_dump() == conv.model_dump()
    forced = {k: v for k, v in FORCED_CALL.items() if k != "input"}
    first = client.responses.create(**forced, conversation=conv.id)
    assert first.conversation.id == conv.id
    alone = client.responses.create(**FORCED_CALL, store=False)
    assert _dumped(first.output)[0]["arguments"] == _dumped(alone.output)[0]["arguments"]

    call = next(item for item in first.output if item.type == "function_call")
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "42"}
    second = client.responses.create(
        model="tiny", input=[output], conversation={"id": conv.id}, tools=TOOLS,
        max_output_tokens=24, temperature=0,
    )  # fmt: skip
    history = [{"role": "user", "content": QUESTION}, *_dumped(first.output), output]
    whole = client.responses.create(
        model="tiny", input=history, tools=TOOLS, max_output_tokens=24, temperature=0, store=False
    )
    assert second.output_text == whole.output_text
    assert second.usage.input_tokens == whole.usage.input_tokens

    items = list(client.conversations.items.list(conv.id, order="asc", limit=2))  # pages
    assert [i.type for i in items] == ["message", *(o.type for o in first.output)] + [
        "function_call_output",
        *(o.type for o in second.output),
    ]
    assert [i.id for i in items[1 : 1 + len(first.output)]] == [o.id for o in first.output]
    assert items[-1].id == second.output[-1].id and items[0].content[0].text == QUESTION
    newest = client.conversations.items.list(conv.id, limit=1)
    assert [i.id for i in newest.data] == [items[-1].id] and newest.has_more

    fco = items[1 + len(first.output)]
    assert client.conversations.items.retrieve(fco.id, conversation_id=conv.id).output == "42"
    back = client.conversations.items.delete(fco.id, conversation_id=conv.id)
    assert back.id == conv.id
    left = [i.id for i in client.conversations.items.list(conv.id, order="asc")]
    assert fco.id not in left and len(left) == len(items) - 1
    with pytest.raises(openai.NotFoundError) as info:
        client.conversations.items.retrieve(fco.id, conversation_id=conv.id)
    assert info.value.body["param"] == "item_id"

    changed = client.conversations.update(conv.id, metadata={"topic": "sums"})
    assert changed.metadata == {"topic": "sums"}
    assert client.conversations.delete(conv.id).deleted is True
    with pytest.raises(openai.NotFoundError):
        client.conversations.retrieve(conv.id)
    with pytest.raises(openai.NotFoundError) as info:
        client.responses.create(model="tiny", input="hi", conversation=conv.id)
    assert info.value.body["param"] == "conversation"


def test_items_added_by_hand_are_the_history_a_response_reads(client: OpenAI) -> None:
    """`conversations.items.create`: up to 20 items, checked as input items, each given an id;
    a response with empty input answers the conversation as it stands; a streamed response adds
    its turn too."""
    conv = client.conversations.create()
    added = client.conversations.items.create(
        conv.id,
        items=[
            {"type": "message", "role": "system", "content": "Answer briefly."},
            {"type": "message", "role": "user", "content": "And 2+2?"},
        ],
    )
    assert [i.role for i in added.data] == ["system", "user"] and added.first_id != added.last_id
    with client.responses.stream(
        model="tiny", input=[], conversation=conv.id, max_output_tokens=16, temperature=0
    ) as stream:
        streamed = stream.get_final_response()
    whole = client.responses.create(
        model="tiny",
        input=[
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "And 2+2?"},
        ],
        max_output_tokens=16,
        temperature=0,
        store=False,
    )
    assert streamed.output_text == whole.output_text and streamed.conversation.id == conv.id
    listed = client.conversations.items.list(conv.id, order="asc").data
    assert [i.id for i in listed] == [*(i.id for i in added.data), streamed.output[0].id]


@pytest.mark.parametrize(
    ("call", "param", "says"),
    [
        (lambda c, cid: c.conversations.items.create(cid, items=[{"type": "web_search_call"}]),
         "items.0.type", "not answered here"),
        (lambda c, cid: c.conversations.items.create(
            cid, items=[{"role": "user", "content": "x"}] * 21), "items", "20"),
        (lambda c, cid: c.conversations.create(metadata={str(i): "v" for i in range(17)}),
         "metadata", "up to 16"),
        (lambda c, cid: c.responses.create(
            model="tiny", input="hi", conversation=cid, previous_response_id="resp-x"),
         "conversation", "not both"),
        (lambda c, cid: c.conversations.items.create(
            cid, items=[{"type": "message", "role": "user", "content": "x", "id": "msg-1"}] * 2),
         "items", "already holds an item 'msg-1'"),
        (lambda c, cid: c.conversations.items.list(cid, include=["message.input_image.image_url"]),
         "include", "adds nothing"),
        (lambda c, cid: c.conversations.items.list(cid, after="msg-nope"), "after", "no item"),
    ],
)  # fmt: skip
def test_what_the_api_does_not_allow_is_refused_by_name(
    client: OpenAI, call: object, param: str, says: str
) -> None:
    conv = client.conversations.create()
    with pytest.raises(openai.BadRequestError) as info:
        call(client, conv.id)
    assert info.value.body["param"] == param and says in info.value.message
    assert client.conversations.items.list(conv.id).data == []  # nothing half-added


def test_a_second_response_while_one_runs_on_the_conversation_is_refused_until_it_ends(
    client: OpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI's 400 `conversation_locked`: each response adds its turn as it ends, so a second
    one started meanwhile would answer the same history and interleave the turns. The server's
    decoding waits at a gate (a slow model, made deterministic) while the first one runs; once
    it ends, a finished stream or one its client left, the conversation takes the next."""
    gate = threading.Event()
    step = RequestBatcher._step

    def gated(self, jobs):  # noqa: ANN001, ANN202 - RequestBatcher._step's signature
        assert gate.wait(60)
        return step(self, jobs)

    monkeypatch.setattr(RequestBatcher, "_step", gated)
    conv = client.conversations.create()
    ask = {"model": "tiny", "max_output_tokens": 8, "temperature": 0, "conversation": conv.id}
    try:
        with client.responses.create(**ask, input="one", stream=True) as events:
            stream = iter(events)
            assert next(stream).type == "response.created"  # the first response runs
            with pytest.raises(openai.BadRequestError) as info:
                client.responses.create(**ask, input="two")
            assert info.value.code == "conversation_locked"
            assert info.value.body["param"] == "conversation" and conv.id in info.value.message
            gate.set()
            last = [e.type for e in stream][-1]
            assert last in ("response.completed", "response.incomplete")  # ended, not failed
        second = client.responses.create(**ask, input="two")
        texts = [
            i.content[0].text
            for i in client.conversations.items.list(conv.id, order="asc")
            if i.type == "message" and i.role == "user"
        ]
        assert texts == ["one", "two"] and second.conversation.id == conv.id

        gate.clear()
        with client.responses.create(**ask, input="three", stream=True) as events:
            assert next(iter(events)).type == "response.created"
        gate.set()  # the client left mid-response: the conversation is free again
        deadline = time.monotonic() + 30
        while True:
            try:
                client.responses.create(**ask, input="four")
                break
            except openai.BadRequestError as exc:
                assert exc.code == "conversation_locked" and time.monotonic() < deadline
                time.sleep(0.1)
    finally:
        gate.set()
    users = [
        i.content[0].text
        for i in client.conversations.items.list(conv.id, order="asc")
        if i.type == "message" and i.role == "user"
    ]
    assert users == ["one", "two", "four"]  # the stream left early added nothing


def test_the_server_keeps_the_last_conversations_used_and_can_keep_none() -> None:
    policy = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    with serve_policy(policy, name="tiny", limits=Limits(conversations=2)) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        a, b = client.conversations.create(), client.conversations.create()
        client.conversations.retrieve(a.id)  # read: `b` is now the oldest
        client.conversations.create()
        client.conversations.retrieve(a.id)
        with pytest.raises(openai.NotFoundError) as info:
            client.conversations.retrieve(b.id)
        assert "last 2 conversations" in info.value.message
    with serve_policy(policy, name="tiny", limits=Limits(conversations=0)) as srv:
        client = OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            client.conversations.create()
        assert "--conversations 0" in info.value.message


def test_the_agents_sdk_keeps_its_session_and_its_runs_on_the_server(server: str) -> None:
    """The Agents SDK's `OpenAIConversationsSession` (history written and read through the
    Conversations API, the second run seeing the first, a third past the context answered with
    `truncation="auto"`) and `Runner.run(conversation_id=...)` (the server adds each turn's items
    itself): both end with the model's answer after its tool call, and the conversation holds
    the whole run."""
    agents = pytest.importorskip("agents")
    from openai import AsyncOpenAI

    seen: list[int] = []
    agent = _calc_agent(agents, server, seen)
    api = AsyncOpenAI(base_url=f"{server}/v1", api_key="none", max_retries=0)

    fits = agents.ModelSettings(truncation="auto")
    plain = agents.Agent(  # no tools: the history fits the tiny model's context
        name="plain",
        model=agents.OpenAIResponsesModel(model="tiny", openai_client=api),
        model_settings=agents.ModelSettings(temperature=0, max_tokens=100),
    )

    async def run() -> tuple[list, list, list]:
        session = agents.OpenAIConversationsSession(openai_client=api)
        await agents.Runner.run(agent, "What is 5 plus ten?", session=session, max_turns=4)
        after_one = await session.get_items()
        second = await agents.Runner.run(plain, "And 7 plus ten?", session=session)
        after_two = await session.get_items()
        sent = second.raw_responses[0].usage.input_tokens
        # the history and the tools are past the tiny model's context now: truncation drops
        # the oldest turns, and the tool is called again
        auto = agent.clone(model_settings=agent.model_settings.resolve(fits))
        await agents.Runner.run(auto, "What is 9 plus ten?", session=session, max_turns=4)
        conv = await api.conversations.create()
        done = await agents.Runner.run(agent, "What is 3 plus ten?", conversation_id=conv.id)
        held = [i async for i in api.conversations.items.list(conv.id, order="asc")]
        alone = await agents.Runner.run(plain, "And 7 plus ten?")
        return after_one, after_two, [done, held, sent, alone.raw_responses[0].usage.input_tokens]

    after_one, after_two, (done, held, sent, alone) = asyncio.run(run())
    kinds = ["message", "function_call", "function_call_output", "message"]
    assert [i.get("type", "message") for i in after_one] == kinds
    assert after_two[: len(after_one)] == after_one
    assert [i.get("type", "message") for i in after_two[len(after_one) :]] == ["message"] * 2
    assert sent > alone  # the second run was sent the first run's history
    assert len(seen) == 3 and isinstance(done.final_output, str) and done.final_output
    assert [i.type for i in held] == kinds
    assert held[-1].content[0].text == done.final_output

"""OpenAI's Responses API (`POST /v1/responses`), the one the Agents SDK and Codex speak, answered
by the chat path.

A request's input items become chat messages: `instructions` the system message, a
`function_call` item an assistant turn's tool call, a `function_call_output` item the tool turn
that answers it. Its function tools and `text.format` become the chat's `tools` and
`response_format`. So the chat template, the tool parser, the grammar of a forced call or a JSON
schema, and the batching are the ones `/v1/chat/completions` uses. The chat answer is written back
as a Response object, or streamed as the Responses events (`response.created`, the output items
with their text or arguments deltas, `response.completed`).

Responses are kept in memory (`ResponseStore`, the last `Limits.stored_responses`; OpenAI's
default is to store), so `previous_response_id` continues a conversation without sending it again
(the Agents SDK's `previous_response_id` and `auto_previous_response_id`), `GET`/`DELETE
/v1/responses/{id}` read and forget one, and `GET /v1/responses/{id}/input_items` lists the items
it was generated from (`response_store.py`). A restart forgets them all; `store: false` keeps one out.
`conversation` names a conversation kept on the server (`conversations.py`): its items are the
history the input continues, and the input and output are added to it when the response ends.
Tools other than functions (web search, file search, computer use) are refused by name.
"""

from __future__ import annotations

import asyncio
import copy
import json
import re
import weakref
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Literal

from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from arena_core.serve.answers import chat_completion, chat_max_tokens, chat_prompt_ids
from arena_core.serve.batching import RequestBatcher
from arena_core.serve.models import ServedModel
from arena_core.serve.protocol import (
    ApiError,
    ChatRequest,
    FunctionDef,
    Limits,
    new_id,
    now,
    validation_message,
)
from arena_core.serve.response_store import (
    Conversation,
    LastUsed,
    ResponseStore,
    StoredResponse,
    as_items,
)

_STRICT = ConfigDict(extra="forbid", strict=True)
LOGPROBS_INCLUDE = "message.output_text.logprobs"


class FunctionTool(FunctionDef):
    """A function tool, flat as the Responses API sends it (chat nests it under `function`)."""

    type: Literal["function"]


class NamedTool(BaseModel):
    model_config = _STRICT

    type: Literal["function"]
    name: str


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, populate_by_name=True)

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = None


class ConversationRef(BaseModel):
    model_config = _STRICT

    id: str


class TextConfig(BaseModel):
    model_config = _STRICT

    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = None  # the only verbosity there is without a choice


class ResponsesRequest(BaseModel):
    """The body of `POST /v1/responses` that Arena answers (strict, as the chat schema)."""

    model_config = _STRICT

    model: str | None = None
    # items are checked one by one (`_add_item`), each error naming it; none: a conversation's
    # or a previous response's history is answered as it stands
    input: str | list[Any] = Field(default_factory=list)
    instructions: str | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedTool | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool = False
    store: bool = True  # keep the response for `previous_response_id` and GET (OpenAI's default)
    previous_response_id: str | None = None  # continue that stored response's conversation
    conversation: str | ConversationRef | None = None  # continue and add to a kept conversation
    # platform fields, accepted where they ask for nothing Arena would have to do
    metadata: dict[str, str] | None = None
    user: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    service_tier: Literal["auto", "default"] | None = None
    # "auto": drop the oldest turns until the prompt fits the context (`fit_context`);
    # "disabled" (the default): a prompt past the context is a 400
    truncation: Literal["disabled", "auto"] | None = None

    @field_validator("tools", mode="before")
    @classmethod
    def _function_tools(cls, v: Any) -> Any:
        for i, tool in enumerate(v if isinstance(v, list) else []):
            kind = tool.get("type") if isinstance(tool, dict) else None
            if kind != "function":
                raise ValueError(
                    f"tool {i} is of type {kind!r}: Arena answers function tools only "
                    '({"type": "function", "name", "description", "parameters"})'
                )
        return v

    @field_validator("include")
    @classmethod
    def _includes(cls, v: list[str] | None) -> list[str] | None:
        other = [name for name in v or [] if name != LOGPROBS_INCLUDE]
        if other:
            raise ValueError(
                f"Arena returns no {', '.join(other)}; the only include it answers is "
                f"{LOGPROBS_INCLUDE}"
            )
        return v


# the chat path's names for what this API calls otherwise, so its errors name the right field
_CHAT_NAMES = {
    "max_tokens": "max_output_tokens",
    "messages": "input",
    "response_format": "text.format",
}


def _in_these_words(exc: ApiError) -> ApiError:
    """A chat-path error said in this API's words (`max_output_tokens`, not `max_tokens`)."""
    for chat_name, name in _CHAT_NAMES.items():
        exc.message = re.sub(rf"\b{chat_name}\b", name, exc.message)
        if exc.param is not None:
            exc.param = re.sub(rf"^{chat_name}\b", name, exc.param)
    return exc


@dataclass
class History:
    """What a request continues: the chat messages before its input and after it (instructions
    left out), the Responses items it is generated from, and where its own input items start
    (what a conversation it names gains, before the output)."""

    messages: list[dict[str, Any]]
    items: list[dict[str, Any]]
    carried: int
    conversation: Conversation | None = None  # the kept conversation the request names


def history(
    req: ResponsesRequest, store: ResponseStore, conversations: LastUsed[Conversation]
) -> History:
    """`req`'s `History`: the stored conversation of `previous_response_id` or the items of its
    `conversation` (a copy), then `req.input`'s items."""
    messages: list[dict[str, Any]] = []
    items: list[dict[str, Any]] = []
    kept: Conversation | None = None
    if req.previous_response_id is not None and req.conversation is not None:
        raise ApiError(
            400,
            "conversation: give previous_response_id or conversation, not both (a response "
            "continues one history)",
            param="conversation",
        )
    if req.previous_response_id is not None:
        before = store.get(req.previous_response_id)
        if before is None:
            kept_note = (
                f"it keeps the last {store.capacity} responses in memory, and a restart forgets "
                "them"
                if store.capacity
                else "it stores none (--stored-responses 0)"
            )
            raise ApiError(
                400,
                f"previous_response_id: no response '{req.previous_response_id}' on this server "
                f"({kept_note}); send the whole conversation as input instead",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        messages = copy.deepcopy(before.conversation)
        items = copy.deepcopy(before.items + before.response["output"])
    if req.conversation is not None:
        name = req.conversation if isinstance(req.conversation, str) else req.conversation.id
        kept = find_conversation(conversations, name, "conversation")
        items = kept.snapshot()
        for i, item in enumerate(items):
            _add_item(messages, item, f"conversation.items.{i}")
    carried = len(items)
    if isinstance(req.input, str):
        messages.append({"role": "user", "content": req.input})
    else:
        for i, item in enumerate(req.input):
            _add_item(messages, item, f"input.{i}")
    if not messages:
        raise ApiError(400, "input: empty (no message to answer)", param="input")
    given = as_items(req.input)
    if kept is not None:
        kept.check_new(given, "input")
    return History(messages, items + given, carried, kept)


def find_conversation(
    conversations: LastUsed[Conversation], conversation_id: str, param: str
) -> Conversation:
    """The conversation `conversation_id`, or a 404 that says what this server keeps."""
    found = conversations.get(conversation_id)
    if found is None:
        raise ApiError(
            404,
            f"{param}: no conversation '{conversation_id}' on this server (it keeps the last "
            f"{conversations.capacity} conversations in memory; a restart forgets them)",
            param=param,
            code="not_found",
        )
    return found


def chat_request(req: ResponsesRequest, messages: list[dict[str, Any]]) -> ChatRequest:
    """The chat request that answers `req` over the conversation `messages`: its instructions as
    the system message, its tools and format (module doc)."""
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    body: dict[str, Any] = {
        "messages": system + copy.deepcopy(messages),
        "temperature": req.temperature,
        "top_p": req.top_p,
        "stream": req.stream,
        "parallel_tool_calls": req.parallel_tool_calls,
    }
    if req.model is not None:
        body["model"] = req.model
    if req.max_output_tokens is not None:
        body["max_tokens"] = req.max_output_tokens
    if req.tools:
        body["tools"] = [
            {"type": "function", "function": t.model_dump(exclude={"type"}, exclude_none=True)}
            for t in req.tools
        ]
    if isinstance(req.tool_choice, NamedTool):
        body["tool_choice"] = {"type": "function", "function": {"name": req.tool_choice.name}}
    elif req.tool_choice is not None:
        body["tool_choice"] = req.tool_choice
    fmt = req.text.format if req.text else None
    if fmt is not None:
        body["response_format"] = _response_format(fmt)
    if LOGPROBS_INCLUDE in (req.include or []) or req.top_logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = req.top_logprobs or 0
    if req.stream:
        body["stream_options"] = {"include_usage": True}
    try:
        return ChatRequest.model_validate(body)
    except ValidationError as exc:
        message, param, code = validation_message(exc, ChatRequest)
        raise _in_these_words(ApiError(400, message, param=param, code=code)) from None


def fit_context(
    model: ServedModel, chat: ChatRequest, limits: Limits
) -> tuple[ChatRequest, list[int]]:
    """`truncation: "auto"`: `chat` without its oldest turns, as few as make the prompt and the
    answer's tokens fit the model's context (OpenAI drops items from the beginning of the
    conversation), and that prompt's ids (the chat path answers them as they are, not rendered
    again). A turn goes whole: from a user message to the next, so no tool output is left
    without its call; system messages stay where they are. The last turn always stays: a prompt
    that does not fit even so is the usual 400."""
    budget = model.context_length - chat_max_tokens(chat, limits)
    fitted, ids = chat, chat_prompt_ids(model, chat)
    messages = list(chat.messages)
    for start in [i for i, m in enumerate(messages) if m.role == "user"][1:]:
        if len(ids) <= budget:
            break
        # every turn before `start` dropped, the system messages among them kept
        kept = [m for m in messages[:start] if m.role in ("system", "developer")]
        fitted = chat.model_copy(update={"messages": kept + messages[start:]})
        ids = chat_prompt_ids(model, fitted)
    return fitted, ids


def _response_format(fmt: TextFormat) -> dict[str, Any]:
    if fmt.type != "json_schema":
        return {"type": fmt.type}
    if not fmt.name or fmt.schema_ is None:
        raise ApiError(
            400, "text.format: type json_schema needs a name and a schema", param="text.format"
        )
    spec = {"name": fmt.name, "schema": fmt.schema_}
    if fmt.strict is not None:
        spec["strict"] = fmt.strict
    if fmt.description is not None:
        spec["description"] = fmt.description
    return {"type": "json_schema", "json_schema": spec}


# the fields each input item may carry: what clients send back of the output items they got
_ITEM_FIELDS = {
    "message": {"type", "role", "content", "id", "status", "phase"},
    "function_call": {"type", "call_id", "name", "arguments", "id", "status"},
    "function_call_output": {"type", "call_id", "output", "id", "status"},
}
_PART_TYPES = ("input_text", "output_text", "text")


def check_input_items(items: list[Any], where: str) -> None:
    """A 400 naming the first of `items` this API would not answer as an input item."""
    scratch: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        _add_item(scratch, item, f"{where}.{i}")


def _add_item(messages: list[dict[str, Any]], item: Any, where: str) -> None:
    """Append one input item to the chat messages (a call joins the assistant turn before it)."""
    if not isinstance(item, dict):
        raise ApiError(400, f"{where}: an input item is a JSON object", param=where)
    kind = item.get("type", "message")
    if kind not in _ITEM_FIELDS:
        raise ApiError(
            400,
            f"{where}: input items of type '{kind}' are not answered here (Arena takes "
            f"{', '.join(_ITEM_FIELDS)})",
            param=f"{where}.type",
            code="unsupported_parameter",
        )
    extra = sorted(set(item) - _ITEM_FIELDS[kind])
    if extra:
        raise ApiError(
            400,
            f"{where}: unsupported field '{extra[0]}' in a '{kind}' item",
            param=f"{where}.{extra[0]}",
            code="unsupported_parameter",
        )
    if kind == "message":
        role = item.get("role")
        if role not in ("user", "system", "developer", "assistant"):
            raise ApiError(
                400,
                f"{where}.role: {role!r} is not one of user, system, developer, assistant",
                param=f"{where}.role",
            )
        messages.append({"role": role, "content": _text(item.get("content"), f"{where}.content")})
        return
    call_id = _string(item, "call_id", where)
    if kind == "function_call":
        call = {
            "id": call_id,
            "type": "function",
            "function": {
                "name": _string(item, "name", where),
                "arguments": _string(item, "arguments", where),
            },
        }
        last = messages[-1] if messages else None
        if last is not None and last["role"] == "assistant" and "tool_calls" in last:
            last["tool_calls"].append(call)
        elif last is not None and last["role"] == "assistant":
            last["tool_calls"] = [call]  # the text the model wrote before its call
        else:
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        return
    output = item.get("output")
    text = output if isinstance(output, str) else _text(output, f"{where}.output")
    messages.append({"role": "tool", "tool_call_id": call_id, "content": text})


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ApiError(400, f"{where}.{key}: a string is required", param=f"{where}.{key}")
    return value


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or text parts (`input_text`, `output_text`)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"{where}: a string or a list of text parts", param=where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in _PART_TYPES or not isinstance(part.get("text"), str):
            raise ApiError(
                400,
                f"{where}.{j}: only text parts ({', '.join(_PART_TYPES[:2])}) are answered "
                f"here, not {kind!r}",
                param=f"{where}.{j}",
                code="unsupported_parameter",
            )
        texts.append(part["text"])
    return "".join(texts)


async def respond(
    batcher: RequestBatcher,
    model: ServedModel,
    req: ResponsesRequest,
    limits: Limits,
    store: ResponseStore,
    conversations: LastUsed[Conversation],
) -> Any:
    """POST /v1/responses for `model`: the chat path's answer as a Response, or its events; the
    Response is stored as it ends unless `store: false`, and its input and output are added to
    the conversation it names."""
    if req.store and not store.capacity:
        raise ApiError(
            400,
            "store: this server stores no responses (--stored-responses 0); send store: false "
            "and the whole conversation as input",
            param="store",
        )
    before = history(req, store, conversations)
    end = before.conversation.claim() if before.conversation is not None else _nothing
    streamed = False
    try:
        chat = chat_request(req, before.messages)
        prompt_ids = None
        if req.truncation == "auto":
            chat, prompt_ids = await asyncio.to_thread(fit_context, model, chat, limits)
        try:
            answer = await chat_completion(batcher, model, chat, limits, prompt_ids=prompt_ids)
        except ApiError as exc:
            raise _in_these_words(exc) from None
        shell = _Shell(req, model.name, before, store)
        if not req.stream:
            choice = answer["choices"][0]
            message = choice["message"]
            items = []
            if message.get("content") or not message.get("tool_calls"):
                text = message.get("content") or ""
                items.append(_message_item(new_id("msg"), text, "completed"))
                if choice.get("logprobs") is not None:
                    items[0]["content"][0]["logprobs"] = _logprobs(choice["logprobs"]["content"])
            items += [_call_item(call, "completed") for call in message.get("tool_calls") or []]
            return shell.body(items, choice["finish_reason"], answer["usage"])
        events = _events(answer.body_iterator, shell, end)
        # a stream the server never starts (its client left first) still ends the response
        weakref.finalize(events, end)
        streamed = True
        return StreamingResponse(
            events,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    finally:
        if not streamed:
            end()


def _nothing() -> None:
    """Ends a response that names no conversation."""


class _Shell:
    """What every Response object of one request repeats (its id, the request's settings), and
    where the finished Response is stored with the conversation it ends."""

    def __init__(
        self, req: ResponsesRequest, model: str, before: History, store: ResponseStore
    ) -> None:
        self.before = before
        self.store = store if req.store else None
        fmt = req.text.format if req.text and req.text.format else None
        choice = req.tool_choice
        self.fields: dict[str, Any] = {
            "id": new_id("resp"),
            "object": "response",
            "created_at": now(),
            "model": model,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "parallel_tool_calls": req.parallel_tool_calls,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "tool_choice": choice.model_dump()
            if isinstance(choice, NamedTool)
            else choice or "auto",
            "tools": [t.model_dump(exclude_none=True) for t in req.tools or []],
            "text": {"format": fmt.model_dump(by_alias=True, exclude_none=True)}
            if fmt
            else {"format": {"type": "text"}},
            "truncation": req.truncation or "disabled",
            "store": req.store,
            "previous_response_id": req.previous_response_id,
            "conversation": {"id": before.conversation.id} if before.conversation else None,
            "metadata": req.metadata or {},
            "error": None,
        }

    def body(
        self, output: list[dict[str, Any]], finish: str | None, counts: dict[str, int] | None
    ) -> dict[str, Any]:
        cut = finish == "length"
        response = {
            **self.fields,
            "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "output": output,
            "usage": _usage(counts),
        }
        before = self.before
        if self.store is not None:
            messages = copy.deepcopy(before.messages)
            for i, item in enumerate(output):
                _add_item(messages, item, f"output.{i}")
            self.store.keep(StoredResponse(copy.deepcopy(response), messages, before.items))
        if before.conversation is not None:
            before.conversation.add(before.items[before.carried :] + output, "input")
        return response

    def in_progress(self) -> dict[str, Any]:
        return {**self.fields, "status": "in_progress", "incomplete_details": None, "output": []}


def _usage(counts: dict[str, int] | None) -> dict[str, Any] | None:
    if counts is None:
        return None
    return {
        "input_tokens": counts["prompt_tokens"],
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": counts["completion_tokens"],
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": counts["total_tokens"],
    }


def _message_item(item_id: str, text: str, status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
    return {
        "type": "message",
        "id": item_id,
        "status": status,
        "role": "assistant",
        "content": [part] if status == "completed" else [],
    }


def _call_item(call: dict[str, Any], status: str, item_id: str | None = None) -> dict[str, Any]:
    function = call["function"]
    return {
        "type": "function_call",
        "id": item_id or new_id("fc"),
        "call_id": call["id"],
        "name": function["name"],
        "arguments": function["arguments"] if status == "completed" else "",
        "status": status,
    }


def _logprobs(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """Chat's `logprobs.content` entries as the Responses API writes them (no `bytes`)."""
    return [
        {
            "token": e["token"],
            "logprob": e["logprob"],
            "top_logprobs": [
                {"token": t["token"], "logprob": t["logprob"]} for t in e.get("top_logprobs") or []
            ],
        }
        for e in entries or []
    ]


async def _events(
    chunks: AsyncIterator[Any], shell: _Shell, end: Callable[[], None]
) -> AsyncIterator[str]:
    """The chat stream's SSE chunks as Responses events (`_EventWriter`), one write per burst;
    leaving early closes the chat stream, which cancels the request's rows. `end` ends the
    response on its conversation, however the stream stops."""
    writer = _EventWriter(shell)
    try:
        yield writer.start()
        async for piece in chunks:
            out = "".join(
                writer.chunk(json.loads(line[len("data: ") :]))
                for line in str(piece).split("\n")
                if line.startswith("data: ") and line != "data: [DONE]"
            )
            if out:
                yield out
            if writer.failed:
                return
        yield writer.end()
    finally:
        end()
        close = getattr(chunks, "aclose", None)
        if close is not None:
            await close()


class _EventWriter:
    """One streamed Response: the message item opens at the first text and closes before the
    calls, which the chat stream sends as the choice ends (each call's id and name, then its
    arguments); the last event carries the whole Response."""

    def __init__(self, shell: _Shell) -> None:
        self.shell = shell
        self.seq = 0
        self.output: list[dict[str, Any]] = []  # the finished items
        self.text: list[str] = []
        self.logprobs: list[dict[str, Any]] = []
        self.message_id: str | None = None  # the message item being written
        self.calls: dict[int, dict[str, Any]] = {}  # chat's tool-call deltas, by index
        self.finish: str | None = None
        self.counts: dict[str, int] | None = None
        self.failed = False

    def event(self, kind: str, **fields: Any) -> str:
        body = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return f"event: {kind}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"

    def start(self) -> str:
        return self.event("response.created", response=self.shell.in_progress()) + self.event(
            "response.in_progress", response=self.shell.in_progress()
        )

    def chunk(self, chunk: dict[str, Any]) -> str:
        """The events of one chat chunk."""
        if "error" in chunk:  # the chat stream reports a failure in-band: so does this one
            self.failed = True
            err = chunk["error"]
            return self.event("error", code=err.get("code"), message=err["message"], param=None)
        if chunk.get("usage"):
            self.counts = chunk["usage"]
        out = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                out += self._text(delta["content"], (choice.get("logprobs") or {}).get("content"))
            for part in delta.get("tool_calls") or []:
                call = self.calls.setdefault(
                    part["index"], {"id": "", "function": {"name": "", "arguments": ""}}
                )
                call["id"] = part.get("id") or call["id"]
                function = part.get("function") or {}
                call["function"]["name"] += function.get("name") or ""
                call["function"]["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                self.finish = choice["finish_reason"]
                if self.calls:
                    out += self._close_message()
                for index in sorted(self.calls):
                    out += _call_events(self.event, self.output, self.calls[index])
                self.calls.clear()
        return out

    def end(self) -> str:
        out = ""
        if self.message_id is None and not self.output:
            out += self._open_message()  # an empty answer is still a message, as in the API
        out += self._close_message()
        response = self.shell.body(self.output, self.finish, self.counts)
        cut = response["status"] == "incomplete"
        return out + self.event(
            "response.incomplete" if cut else "response.completed", response=response
        )

    def _text(self, text: str, entries: list[dict[str, Any]] | None) -> str:
        out = self._open_message() if self.message_id is None else ""
        piece = _logprobs(entries)
        self.text.append(text)
        self.logprobs.extend(piece)
        return out + self.event(
            "response.output_text.delta",
            item_id=self.message_id,
            output_index=len(self.output),
            content_index=0,
            delta=text,
            logprobs=piece,
        )

    def _open_message(self) -> str:
        self.message_id = new_id("msg")
        index = len(self.output)
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self.event(
            "response.output_item.added",
            output_index=index,
            item=_message_item(self.message_id, "", "in_progress"),
        ) + self.event(
            "response.content_part.added",
            item_id=self.message_id,
            output_index=index,
            content_index=0,
            part=part,
        )

    def _close_message(self) -> str:
        if self.message_id is None:
            return ""
        index, whole = len(self.output), "".join(self.text)
        item = _message_item(self.message_id, whole, "completed")
        item["content"][0]["logprobs"] = list(self.logprobs)
        self.output.append(item)
        where = {"item_id": self.message_id, "output_index": index, "content_index": 0}
        self.message_id = None
        return (
            self.event(
                "response.output_text.done",
                **where,
                text=whole,
                logprobs=item["content"][0]["logprobs"],
            )
            + self.event("response.content_part.done", **where, part=item["content"][0])
            + self.event("response.output_item.done", output_index=index, item=item)
        )


def _call_events(event: Any, output: list[dict[str, Any]], call: dict[str, Any]) -> str:
    """One whole tool call's events: its item, its arguments in one delta, and done."""
    index = len(output)
    item_id = new_id("fc")
    added = _call_item(call, "in_progress", item_id)
    done = _call_item(call, "completed", item_id)
    output.append(done)
    arguments = done["arguments"]
    return (
        event("response.output_item.added", output_index=index, item=added)
        + event(
            "response.function_call_arguments.delta",
            item_id=item_id,
            output_index=index,
            delta=arguments,
        )
        + event(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            name=done["name"],
            arguments=arguments,
        )
        + event("response.output_item.done", output_index=index, item=done)
    )

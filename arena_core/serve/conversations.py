"""OpenAI's Conversations API: conversations a client keeps on the server, as lists of Responses
items, and the routes that make, read, change and delete them and their items (the official
client's `conversations` and `conversations.items`; the Agents SDK's
`OpenAIConversationsSession`, and `Runner.run(..., conversation_id=...)`, which names one in
`POST /v1/responses`).

An item added here is checked as a Responses input item is (`responses_api`: messages with text
parts, function calls and their outputs; anything else is a 400 naming it), gets an id when it
has none, and keeps it. Kept in memory, the last `--conversations N` made or used
(`response_store.LastUsed`); a restart forgets them.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, ConfigDict, Field, field_validator

from arena_core.serve.protocol import ApiError, new_id, now, parse_body
from arena_core.serve.response_store import (
    Conversation,
    LastUsed,
    as_items,
    item_list,
    items_page,
    refuse_include,
)
from arena_core.serve.responses_api import check_input_items, find_conversation

MAX_ITEMS_PER_REQUEST = 20  # OpenAI's: "You may add up to 20 items at a time"
_STRICT = ConfigDict(extra="forbid", strict=True)


def _metadata(value: dict[str, str] | None) -> dict[str, str] | None:
    """OpenAI's metadata rules: up to 16 pairs, keys up to 64 characters, values up to 512."""
    if value is None:
        return None
    if len(value) > 16:
        raise ValueError(f"{len(value)} pairs; up to 16")
    for key, text in value.items():
        if len(key) > 64:
            raise ValueError(f"key {key[:20]!r}... is {len(key)} characters; up to 64")
        if len(text) > 512:
            raise ValueError(f"the value of {key!r} is {len(text)} characters; up to 512")
    return value


class ConversationCreate(BaseModel):
    """The body of `POST /v1/conversations`."""

    model_config = _STRICT

    items: list[Any] | None = Field(None, max_length=MAX_ITEMS_PER_REQUEST)
    metadata: dict[str, str] | None = None
    safety_identifier: str | None = None  # accepted: it asks for nothing Arena would do

    _check_metadata = field_validator("metadata")(_metadata)


class ConversationUpdate(BaseModel):
    """The body of `POST /v1/conversations/{id}`: its metadata, replaced."""

    model_config = _STRICT

    metadata: dict[str, str]

    _check_metadata = field_validator("metadata")(_metadata)


class ItemsCreate(BaseModel):
    """The body of `POST /v1/conversations/{id}/items`."""

    model_config = _STRICT

    items: list[Any] = Field(min_length=1, max_length=MAX_ITEMS_PER_REQUEST)


def add_conversation_routes(app: FastAPI, conversations: LastUsed[Conversation]) -> None:
    """The Conversations API's routes on `app`, over `conversations`."""

    @app.post("/v1/conversations")
    async def create_conversation(request: Request) -> Any:
        req = await parse_body(request, ConversationCreate)
        if not conversations.capacity:
            raise ApiError(
                400,
                "this server keeps no conversations (--conversations 0); send the whole "
                "conversation as input, or chain responses with previous_response_id",
            )
        made = Conversation(new_id("conv"), now(), dict(req.metadata or {}))
        made.add(_new_items(req.items or []))
        conversations.put(made.id, made)
        return made.public()

    @app.get("/v1/conversations/{conversation_id}")
    async def get_conversation(conversation_id: str) -> Any:
        return find_conversation(conversations, conversation_id, "conversation_id").public()

    @app.post("/v1/conversations/{conversation_id}")
    async def update_conversation(conversation_id: str, request: Request) -> Any:
        found = find_conversation(conversations, conversation_id, "conversation_id")
        found.metadata = dict((await parse_body(request, ConversationUpdate)).metadata)
        return found.public()

    @app.delete("/v1/conversations/{conversation_id}")
    async def delete_conversation(conversation_id: str) -> Any:
        find_conversation(conversations, conversation_id, "conversation_id")
        conversations.delete(conversation_id)
        return {"id": conversation_id, "object": "conversation.deleted", "deleted": True}

    @app.post("/v1/conversations/{conversation_id}/items")
    async def add_items(conversation_id: str, request: Request) -> Any:
        refuse_include(request.query_params)
        found = find_conversation(conversations, conversation_id, "conversation_id")
        added = _new_items((await parse_body(request, ItemsCreate)).items)
        found.add(added)
        return item_list(added)

    @app.get("/v1/conversations/{conversation_id}/items")
    async def list_items(conversation_id: str, request: Request) -> Any:
        found = find_conversation(conversations, conversation_id, "conversation_id")
        whose = f"the items of conversation {conversation_id}"
        return items_page(found.snapshot(), whose, request.query_params)

    @app.get("/v1/conversations/{conversation_id}/items/{item_id}")
    async def get_item(conversation_id: str, item_id: str, request: Request) -> Any:
        refuse_include(request.query_params)
        found = find_conversation(conversations, conversation_id, "conversation_id")
        for item in found.snapshot():
            if item["id"] == item_id:
                return item
        raise _no_item(conversation_id, item_id)

    @app.delete("/v1/conversations/{conversation_id}/items/{item_id}")
    async def delete_item(conversation_id: str, item_id: str) -> Any:
        found = find_conversation(conversations, conversation_id, "conversation_id")
        if not found.remove(item_id):
            raise _no_item(conversation_id, item_id)
        return found.public()


def _new_items(given: list[Any]) -> list[dict[str, Any]]:
    """Items a client adds, checked as Responses input items are, each with an id."""
    check_input_items(given, "items")
    return as_items(given)


def _no_item(conversation_id: str, item_id: str) -> ApiError:
    return ApiError(
        404,
        f"item_id: no item '{item_id}' in conversation {conversation_id}",
        param="item_id",
        code="not_found",
    )

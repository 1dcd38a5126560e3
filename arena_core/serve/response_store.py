"""The responses a server remembers (OpenAI stores them by default), and the items each was
generated from.

A stored response keeps its whole conversation twice: as chat messages, which
`previous_response_id` continues, and as Responses items, which `GET
/v1/responses/{id}/input_items` lists (the official client's `responses.input_items.list`): the
items used to generate it, in order: the stored chain's inputs and outputs before it, then its own
input. Every item has an id; one the client sent without it gets one here (`msg-`, `fc-`, `fco-`)
and keeps it down the chain. Kept in memory: the last `--stored-responses N` stored or read; a
restart forgets them.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from arena_core.serve.protocol import ApiError, new_id

_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


@dataclass
class StoredResponse:
    """A response as returned, its conversation as chat messages (instructions left out:
    OpenAI does not carry them to the next response), and the items it was generated from."""

    response: dict[str, Any]
    conversation: list[dict[str, Any]]
    items: list[dict[str, Any]] = field(default_factory=list)


class ResponseStore:
    """The responses a server remembers, in memory: the last `capacity` stored or read (reading
    one keeps it, so a conversation in use is not the one forgotten); 0 stores none."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, stored: StoredResponse) -> None:
        with self._lock:
            self._items[stored.response["id"]] = stored
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def get(self, response_id: str) -> StoredResponse | None:
        with self._lock:
            stored = self._items.get(response_id)
            if stored is not None:
                self._items.move_to_end(response_id)
            return stored

    def delete(self, response_id: str) -> bool:
        with self._lock:
            return self._items.pop(response_id, None) is not None


def as_items(given: str | list[Any]) -> list[dict[str, Any]]:
    """A request's `input` (already checked by the chat conversion) as Responses items: a string
    is one user message; a message's string content becomes one text part; each gets an id and
    `status: completed` unless it has them."""
    if isinstance(given, str):
        given = [{"type": "message", "role": "user", "content": given}]
    items = []
    for raw in given:
        item = copy.deepcopy(raw)
        kind = item.setdefault("type", "message")
        if kind == "message":
            part = "output_text" if item.get("role") == "assistant" else "input_text"
            content = item.get("content")
            if isinstance(content, str):
                content = [{"type": part, "text": content}]
            for p in content:
                if p.get("type") == "text":
                    p["type"] = part
                if p["type"] == "output_text":
                    p.setdefault("annotations", [])
            item["content"] = content
        item.setdefault("id", new_id(_ID_PREFIX[kind]))
        item.setdefault("status", "completed")
        items.append(item)
    return items


def input_items_page(
    stored: StoredResponse, *, limit: int = 20, order: str = "desc", after: str | None = None
) -> dict[str, Any]:
    """`GET /v1/responses/{id}/input_items`: one page of the items `stored` was generated from,
    newest first (`desc`, OpenAI's default) or oldest first, after the item `after`."""
    if not 1 <= limit <= 100:
        raise ApiError(400, f"limit: {limit} is not between 1 and 100", param="limit")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order: {order!r} is not asc or desc", param="order")
    items = stored.items if order == "asc" else stored.items[::-1]
    start = 0
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(
                400,
                f"after: no item '{after}' among the input items of {stored.response['id']}",
                param="after",
            )
        start = ids.index(after) + 1
    page = items[start : start + limit]
    return {
        "object": "list",
        "data": copy.deepcopy(page),
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(items),
    }

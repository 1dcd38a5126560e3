"""What a Responses server remembers: the responses it answered (OpenAI stores them by default)
with the items each was generated from, and the conversations clients keep on it (OpenAI's
Conversations API).

A stored response keeps its whole conversation twice: as chat messages, which
`previous_response_id` continues, and as Responses items, which `GET
/v1/responses/{id}/input_items` lists (the official client's `responses.input_items.list`): the
items used to generate it, in order: the stored chain's inputs and outputs before it, then its own
input. A conversation is a list of such items that a response given `conversation` reads as its
history and adds its input and output to. Every item has an id; one the client sent without it
gets one here (`msg-`, `fc-`, `fco-`) and keeps it. Kept in memory: the last
`--stored-responses N` responses and the last `--conversations N` conversations stored or read; a
restart forgets them.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from arena_core.serve.protocol import ApiError, new_id

T = TypeVar("T")
_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


@dataclass
class StoredResponse:
    """A response as returned, its conversation as chat messages (instructions left out:
    OpenAI does not carry them to the next response), and the items it was generated from."""

    response: dict[str, Any]
    conversation: list[dict[str, Any]]
    items: list[dict[str, Any]] = field(default_factory=list)


class LastUsed(Generic[T]):
    """Values by id, in memory: the last `capacity` put or read (reading one keeps it, so a
    conversation in use is not the one forgotten); 0 keeps none."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(0, int(capacity))
        self._values: OrderedDict[str, T] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str, value: T) -> None:
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.capacity:
                self._values.popitem(last=False)

    def get(self, key: str) -> T | None:
        with self._lock:
            value = self._values.get(key)
            if value is not None:
                self._values.move_to_end(key)
            return value

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._values.pop(key, None) is not None


class ResponseStore(LastUsed[StoredResponse]):
    """The responses a server remembers (`LastUsed`), by response id."""

    def keep(self, stored: StoredResponse) -> None:
        self.put(stored.response["id"], stored)


@dataclass
class Conversation:
    """A conversation a client keeps on the server: its Responses items, oldest first."""

    id: str
    created_at: int
    metadata: dict[str, str]
    items: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    answering: bool = False  # a response on it has not ended yet

    def claim(self) -> Callable[[], None]:
        """Mark a response on this conversation as running; returns what ends it (idempotent).

        A second response while one runs is OpenAI's 400 `conversation_locked`: each adds its
        items as it ends, so two at once would answer the same history and interleave their
        turns."""
        with self.lock:
            if self.answering:
                raise ApiError(
                    400,
                    f"conversation: a response on conversation {self.id} is still being "
                    "generated; retry when it has ended (it adds its turn to the conversation "
                    "then, and the next response continues from there)",
                    param="conversation",
                    code="conversation_locked",
                )
            self.answering = True
        ended = threading.Event()

        def end() -> None:
            with self.lock:
                if not ended.is_set():
                    ended.set()
                    self.answering = False

        return end

    def add(self, items: list[dict[str, Any]], param: str = "items") -> None:
        """Append `items`; an id the conversation already holds, or that two of them share, is a
        400 naming it (items are read and deleted by id), and then nothing is added."""
        with self.lock:
            self._check_new(items, param)
            self.items += copy.deepcopy(items)

    def check_new(self, items: list[dict[str, Any]], param: str) -> None:
        """The 400 `add` would raise for `items`, before anything is generated for them."""
        with self.lock:
            self._check_new(items, param)

    def _check_new(self, items: list[dict[str, Any]], param: str) -> None:
        held = {item["id"] for item in self.items}
        for item in items:
            if item["id"] in held:
                raise ApiError(
                    400,
                    f"{param}: conversation {self.id} already holds an item '{item['id']}'; "
                    "send it without its id to add it again",
                    param=param,
                )
            held.add(item["id"])

    def remove(self, item_id: str) -> bool:
        """Delete the item `item_id`; False when the conversation holds none."""
        with self.lock:
            kept = [item for item in self.items if item["id"] != item_id]
            found, self.items = len(kept) < len(self.items), kept
            return found

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(self.items)

    def public(self) -> dict[str, Any]:
        """The conversation object the API returns."""
        return {
            "id": self.id,
            "object": "conversation",
            "created_at": self.created_at,
            "metadata": dict(self.metadata),
        }


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


def items_page(items: list[dict[str, Any]], whose: str, query: Any) -> dict[str, Any]:
    """One page of `items` (a response's input items, a conversation's items: `whose`, for the
    errors) as a request's query asks: newest first (`order=desc`, OpenAI's default) or oldest
    first, `limit` (1-100, 20) after the item `after`; a bad value is a 400 naming it."""
    refuse_include(query)
    limit = query.get("limit", "20")
    if not limit.strip().isdigit() or not 1 <= int(limit) <= 100:
        raise ApiError(400, f"limit: {limit!r} is not a whole number from 1 to 100", param="limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise ApiError(400, f"order: {order!r} is not asc or desc", param="order")
    items = items if order == "asc" else items[::-1]
    start, after = 0, query.get("after")
    if after is not None:
        ids = [item["id"] for item in items]
        if after not in ids:
            raise ApiError(400, f"after: no item '{after}' among {whose}", param="after")
        start = ids.index(after) + 1
    page = items[start : start + int(limit)]
    return item_list(page, has_more=start + int(limit) < len(items))


def refuse_include(query: Any) -> None:
    """A 400 for an `include` in a request's query: a stored item has nothing more to add."""
    include = query.getlist("include") + query.getlist("include[]")
    if include:
        raise ApiError(
            400,
            f"include: {include[0]!r} adds nothing to a stored item here",
            param="include",
            code="unsupported_parameter",
        )


def item_list(page: list[dict[str, Any]], *, has_more: bool = False) -> dict[str, Any]:
    """A list object of items, as the items routes answer."""
    return {
        "object": "list",
        "data": copy.deepcopy(page),
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": has_more,
    }

"""Streamed (SSE) chunks built from text, not from dicts: the server's hot path at many streams."""

from __future__ import annotations

import json


class ChunkTemplate:
    """A stream's delta and finish chunks, filled into text precomputed from one real chunk.

    Why: at many streams a server sends hundreds of chunks per second, and building each one as
    a dict and serialising it with `json.dumps` is a large part of the event loop's work, paid
    under the GIL that the engine thread needs to decode. Only the choice's index and text change between
    chunks; the bytes are those `json.dumps` of the dict gives (tests/serve/test_stream_chunks.py
    compares them)."""

    def __init__(self, empty_chunk: str, chat: bool) -> None:
        head, tail = empty_chunk.rsplit("[{}]", 1)  # `choices` of the sample chunk is [{}]
        self.head, self.tail = head + "[", "]" + tail
        self.delta_fmt = (
            '{"index":%d,"delta":{"content":%s},"logprobs":null,"finish_reason":null}'
            if chat
            else '{"index":%d,"text":%s,"logprobs":null,"finish_reason":null}'
        )
        self.finish_fmt = (
            '{"index":%d,"delta":{},"logprobs":null,"finish_reason":%s}'
            if chat
            else '{"index":%d,"text":"","logprobs":null,"finish_reason":%s}'
        )

    def delta(self, index: int, text: str) -> str:
        return self.head + self.delta_fmt % (index, json.dumps(text)) + self.tail

    def finish(self, index: int, reason: str) -> str:
        return self.head + self.finish_fmt % (index, json.dumps(reason)) + self.tail

"""The streamed chunks the server fills from a template are, byte for byte, the JSON of the chunk
dicts they replace (`arena_core.serve.chunks.ChunkTemplate`), for chat and text completions, with
and without the usage field, for text that JSON must escape."""

from __future__ import annotations

import json

import pytest

from arena_core.serve.chunks import ChunkTemplate
from arena_core.serve.protocol import chat_delta, text_choice

TEXTS = ["4", "", ' "quoted" \\ back', "line\nbreak\ttab", "café ✓ 日本", "\ufffd", "{}[]%d%s"]


def _chunk(choices: list, chat: bool, with_usage: bool) -> str:
    body = {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1700000000,
        "model": "run[{}]:best",  # a name with the template's own marker in it
        "choices": choices,
    }
    if with_usage:
        body["usage"] = None
    return f"data: {json.dumps(body, separators=(',', ':'))}\n\n"


@pytest.mark.parametrize("chat", [True, False])
@pytest.mark.parametrize("with_usage", [True, False])
def test_template_chunks_equal_the_json_of_the_chunk_dicts(chat: bool, with_usage: bool) -> None:
    template = ChunkTemplate(_chunk([{}], chat, with_usage), chat)
    for index in (0, 7):
        for text in TEXTS:
            piece = chat_delta(index, {"content": text}) if chat else text_choice(index, text, None)
            assert template.delta(index, text) == _chunk([piece], chat, with_usage)
        for reason in ("stop", "length"):
            done = chat_delta(index, {}, reason) if chat else text_choice(index, "", reason)
            assert template.finish(index, reason) == _chunk([done], chat, with_usage)

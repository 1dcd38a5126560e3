"""OpenAI's logprobs `bytes`: each token's own bytes, so a client that joins them gets the text
back even where one character spans several tokens (each of which decodes alone to U+FFFD).
Through real Hugging Face tokenizers (the tiny model's byte-level BPE, SmolLM2's where it is
cached) and through the chat route with the official `openai` client, over a server on the
embedded tiny model.

Traffic goes only to 127.0.0.1, to the server conftest.py's `server` fixture starts and stops.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import OpenAI

from arena_core.serve.answer_extras import TokenText

TEXTS = ["你好, 世界", "héllo wörld 😀🎉", "plain ascii", " naïve café"]


def _tokenizers() -> list:
    from transformers import AutoTokenizer

    from arena_core.models import load_policy

    found = [load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}}).tokenizer]
    smollm2 = Path.home() / ".cache/arena/models/smollm2-135m-instruct"
    if (smollm2 / "tokenizer.json").exists():
        found.append(AutoTokenizer.from_pretrained(smollm2))
    return found


@pytest.mark.parametrize("text", TEXTS)
def test_joined_token_bytes_are_the_texts_bytes(text: str) -> None:
    for tokenizer in _tokenizers():
        words = TokenText(tokenizer)
        ids = tokenizer.encode(text, add_special_tokens=False)
        if any(ord(c) > 0xFFF for c in text):  # CJK, emoji: split across tokens in both
            assert any("\ufffd" in words(i) for i in ids)
        assert bytes(b for i in ids for b in words.raw(i)) == text.encode("utf-8")


def test_chat_logprobs_bytes_spell_the_answer(client: OpenAI) -> None:
    """A constrained answer with an accent and an emoji (one byte per token in the tiny
    model's vocabulary): the sampled tokens' bytes, joined, are the answer's."""
    schema = {
        "type": "object",
        "properties": {"w": {"const": "héllo 😀"}},
        "required": ["w"],
        "additionalProperties": False,
    }
    answer = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=40,
        temperature=0, logprobs=True, top_logprobs=2,
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": schema}},
    ).choices[0]  # fmt: skip
    assert answer.message.content == '{"w":"héllo 😀"}'
    entries = answer.logprobs.content
    assert entries[-1].token == "<|im_end|>"  # the stop token is listed, not written
    assert bytes(b for e in entries[:-1] for b in e.bytes) == answer.message.content.encode()
    for e in entries:
        for alt in e.top_logprobs:
            assert alt.bytes and (alt.token != "\ufffd" or alt.bytes != [239, 191, 189])

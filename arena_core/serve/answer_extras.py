"""What a request asked to get back besides text, and the response pieces that carry it:
logprobs (chat's `logprobs.content`, completions' legacy `logprobs`), token ids (vLLM's
`prompt_token_ids` and `token_ids`, which prime-rl and verifiers read), tool calls.

The logprobs are the engine's own: each sampled token's logprob under the distribution it was
sampled from (`arena_core.engines.sampling.sample_next`, the behaviour logprob a learner's
importance weights use; with a grammar, the masked distribution), and the alternatives are the
top entries of that same distribution, so a greedy token is always the first of them. The EOS
token that ended an answer is a sampled token too: it is in `token_ids` and in the logprobs
(its text is empty), as vLLM returns it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from arena_core.serve.chat import ToolReply, could_start_call, read_tool_calls


@dataclass
class Wants:
    """The extras of one request's answer."""

    chat: bool
    logprobs: int | None = None  # None: none; k: alternatives per token
    token_ids: bool = False
    tools: list[dict[str, Any]] | None = (
        None  # read tool calls out of the text (tool_choice != none)
    )
    prompts: list[list[int]] = field(default_factory=list)  # one per prompt
    parallel_tool_calls: bool = True
    echo: list[str] | None = None  # completions' `echo`: each prompt's text, before its answers
    generate: bool = True  # False: `max_tokens: 0` with echo, the prompt alone is the answer
    prompt_logprobs: int | None = None  # vLLM's `prompt_logprobs`: alternatives per prompt token
    prefix: str = ""  # chat's `echo`: the last message's text, when it is the reply's role
    role: str = "assistant"  # the reply's: the last message's when no assistant turn is opened

    @property
    def prompt_scoring(self) -> int | None:
        """The alternatives per prompt token to score (echo's and vLLM's, the larger), or None:
        the prompt is not scored."""
        echoed = self.logprobs if self.echo else None
        asked = [k for k in (self.prompt_logprobs, echoed) if k is not None]
        return max(asked) if asked else None

    @property
    def plain(self) -> bool:
        """Nothing but text: the stream's fast chunk template applies."""
        return (
            self.logprobs is None
            and not self.token_ids
            and not self.tools
            and not self.echo
            and self.prompt_logprobs is None
        )


class TokenText:
    """Each token's own text, and its bytes, cached per token id (a server decodes the same ids
    all day)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, str] = {}
        self._bytes: dict[int, list[int]] = {}

    def __call__(self, token: int) -> str:
        text = self._cache.get(token)
        if text is None:
            text = self.tokenizer.decode([token], skip_special_tokens=False)
            self._cache[token] = text
        return text

    def raw(self, token: int) -> list[int]:
        """The token's own bytes (OpenAI's `bytes`): a token holding part of a multi-byte
        character decodes alone to U+FFFD, but its bytes, joined with its neighbours', are the
        character. Read from the vocabulary where it spells bytes: a byte-level BPE (GPT-2's
        alphabet: SmolLM2, Qwen, Llama 3) or SentencePiece's byte fallback (`<0xE4>`)."""
        found = self._bytes.get(token)
        if found is None:
            piece = self(token)
            found = list(piece.encode("utf-8"))
            if "\ufffd" in piece:
                found = _vocabulary_bytes(self.tokenizer, token) or found
            self._bytes[token] = found
        return found


def _vocabulary_bytes(tokenizer: Any, token: int) -> list[int] | None:
    """The bytes a token's vocabulary entry spells, or None where it spells none."""
    entry = tokenizer.convert_ids_to_tokens(token)
    if not isinstance(entry, str):
        return None
    fallback = re.fullmatch(r"<0x([0-9A-Fa-f]{2})>", entry)
    if fallback:
        return [int(fallback.group(1), 16)]
    decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
    if type(decoder).__name__ == "ByteLevel" and all(c in _BYTE_OF for c in entry):
        return [_BYTE_OF[c] for c in entry]
    return None


def _byte_alphabet() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: the character a byte-level BPE writes for each
    byte (printable bytes as themselves, the others shifted past 255), to that byte."""
    kept = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    kept += range(ord("®"), ord("ÿ") + 1)
    chars, extra = {}, 0
    for byte in range(256):
        if byte in kept:
            chars[chr(byte)] = byte
        else:
            chars[chr(256 + extra)] = byte
            extra += 1
    return chars


_BYTE_OF = _byte_alphabet()


def _entry(text: TokenText, token: int, logprob: float) -> dict[str, Any]:
    return {"token": text(token), "logprob": logprob, "bytes": text.raw(token)}


def chat_logprobs(text: TokenText, choice: Any, start: int, end: int) -> dict[str, Any]:
    """Chat's `logprobs` for the choice's tokens [start, end)."""
    content = []
    for i in range(start, end):
        entry = _entry(text, choice.ids[i], choice.logprobs[i])
        top = choice.top[i] if i < len(choice.top) else []
        entry["top_logprobs"] = [_entry(text, t, lp) for t, lp in top]
        content.append(entry)
    return {"content": content, "refusal": None}


def text_completion_logprobs(
    text: TokenText, choice: Any, start: int, end: int, offset: int
) -> dict[str, Any]:
    """Completions' legacy `logprobs` for tokens [start, end); `offset`: the text before them."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for i in range(start, end):
        piece = text(choice.ids[i])
        tokens.append(piece)
        token_lps.append(choice.logprobs[i])
        top = choice.top[i] if i < len(choice.top) else []
        tops.append({text(t): lp for t, lp in top})
        offsets.append(offset)
        offset += len(piece)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def finish_reason(reason: str | None, reply: ToolReply | None) -> str | None:
    if reply is not None and reply.calls and reason == "stop":
        return "tool_calls"
    return reason


def message(text: str, reply: ToolReply | None) -> dict[str, Any]:
    if reply is None or not reply.calls:
        return {"role": "assistant", "content": text}
    return {"role": "assistant", "content": reply.content, "tool_calls": reply.calls}


class ToolStream:
    """One streamed choice of a request with tools: content is sent until a tool call may
    begin; from there the text is held, and read for calls when the choice ends."""

    def __init__(self, tools: list[dict[str, Any]], parallel: bool = True) -> None:
        self.tools, self.parallel = tools, parallel
        self.text = ""
        self.sent = 0
        self.holding = False

    def feed(self, piece: str) -> str:
        """The content that can go out now."""
        self.text += piece
        if self.holding:
            return ""
        cut = could_start_call(self.text)
        self.holding = self.text.find("<tool_call>", self.sent) >= 0
        out, self.sent = self.text[self.sent : cut], max(cut, self.sent)
        return out

    def end(self) -> tuple[str, list[dict[str, Any]]]:
        """(content still to send, tool calls) once the choice ended."""
        rest = self.text[self.sent :]
        if not rest:
            return "", []
        reply = read_tool_calls(rest, self.tools, parallel=self.parallel)
        return (reply.content or ""), reply.calls


def tool_call_deltas(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`delta.tool_calls` as OpenAI streams them: the call's id, type and name with empty
    arguments first, then the arguments (clients concatenate `arguments` by `index`)."""
    out = []
    for i, call in enumerate(calls):
        fn = call["function"]
        out.append(
            {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": fn["name"], "arguments": ""},
            }
        )
        out.append({"index": i, "function": {"arguments": fn["arguments"]}})
    return out

"""Constrained decoding for the server: JSON schemas and tool calls as grammars (llguidance).

Why llguidance (PyPI `llguidance`, by the guidance-ai team; vLLM's `guidance` backend and
llama.cpp's): it is one self-contained Rust wheel with no dependency (xgrammar, vLLM's default,
pulls in triton and apache-tvm-ffi, about 1 GB that a CPU install never otherwise needs), it
computes a token mask in tens of microseconds on the CPU without precomputing anything per
schema (outlines-core builds an index of the whole vocabulary per schema, seconds on a 49k
vocabulary), it compiles JSON Schema itself (refs, anyOf, enums, formats) and reports a schema it
cannot compile with a clear message, and it is actively maintained.

How a request decodes under a grammar: each of its rows owns a matcher; before every sample the
running batch (`arena_core.serve.running`) asks the matchers which tokens may come next and masks
the others out of the logits (`ContinuousBatch.restrict`), then each row's matcher consumes the
sampled token. EOS is allowed only once the grammar accepts, so an answer that ends is valid; one
that reaches `max_tokens` first ends with finish_reason "length", as OpenAI's does.

JSON is generated compact (no free whitespace): a small model given the freedom of whitespace can
spend its whole budget on it.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

import torch

from arena_core.extras import MissingExtraError

_COMPACT = {"whitespace_flexible": False}
# tokenizer -> {(vocab, eos ids): llguidance's view of it}; weak, so a freed model frees it too
_TOKENIZERS: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class GrammarError(ValueError):
    """A schema (or tool list) the grammar library cannot compile; the message is the library's."""


def _llguidance() -> Any:
    try:
        import llguidance
        import llguidance.hf
    except ImportError:
        raise MissingExtraError(
            "serve", "constrained decoding (response_format, tools)", "llguidance"
        ) from None
    return llguidance


def _lltokenizer(model: Any) -> Any:
    """The served model's tokenizer as llguidance sees it (built once per tokenizer: ~1 s for
    a 49k vocabulary)."""
    llg = _llguidance()
    vocab = _vocab_size(model)
    eos = tuple(sorted(getattr(model.backend, "eos_ids", set()) or {model.tokenizer.eos_token_id}))
    with _LOCK:
        built = _TOKENIZERS.setdefault(model.tokenizer, {})
        found = built.get((vocab, eos))
        if found is None:
            found = llg.hf.from_tokenizer(model.tokenizer, n_vocab=vocab, eos_token=list(eos))
            built[(vocab, eos)] = found
    return found


def _vocab_size(model: Any) -> int:
    """The width of the model's logits (a head may be padded past the tokenizer's size)."""
    module = model.module
    head = module.get_output_embeddings() if module is not None else None
    if head is not None:
        return int(head.weight.shape[0])
    config = getattr(module, "config", None)
    return int(getattr(config, "vocab_size", 0) or len(model.tokenizer))


class Grammar:
    """A compiled grammar for one served model; `matcher()` starts one row's state."""

    def __init__(self, model: Any, grammar: str, lark: str) -> None:
        self.tokenizer = _lltokenizer(model)
        error = _llguidance().LLMatcher.validate_grammar(grammar, self.tokenizer)
        if error:
            raise GrammarError(error)
        self.grammar = grammar
        # the same constraint as Lark text: what a backend with its own llguidance (vLLM's
        # guidance backend) takes through SamplingParams.grammar
        self.lark = lark

    def matcher(self) -> RowMatcher:
        return RowMatcher(self)


class RowMatcher:
    """One row's position in its grammar."""

    def __init__(self, grammar: Grammar) -> None:
        self.inner = _llguidance().LLMatcher(grammar.tokenizer, grammar.grammar)
        self.words = (grammar.tokenizer.vocab_size + 31) // 32

    def consume(self, token: int) -> None:
        # a token outside the mask cannot be sampled; the matcher keeps any error to itself
        self.inner.consume_token(int(token))

    def fill(self, row: torch.Tensor) -> None:
        self.inner.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())


# byte value -> the additive logit bias of its 8 tokens (bit i of a mask byte: token i allowed);
# a table lookup (an embedding) and one add cost ~0.4 ms for 8 rows of a 49k vocabulary, where
# unpacking bits and `masked_fill` took ~6 ms (measured on this 2-core machine)
_BYTE_BIAS = torch.tensor(
    [[0.0 if (b >> i) & 1 else float("-inf") for i in range(8)] for b in range(256)]
)


def token_bias(matchers: list[RowMatcher], eos_ids: set[int]) -> torch.Tensor:
    """[len(matchers), vocab] float32: 0 for the tokens each row's grammar allows next, -inf
    for the others (added to the logits). A row whose grammar allows nothing (its matcher
    failed) may only end: a row of all -inf would make the whole batch's sampling fail."""
    rows, words = len(matchers), matchers[0].words
    bitmask = torch.empty((rows, words), dtype=torch.int32)
    for i, m in enumerate(matchers):
        m.fill(bitmask[i])
    stuck = (bitmask == 0).all(dim=-1)
    if bool(stuck.any()):
        for row in stuck.nonzero()[:, 0].tolist():
            for token in eos_ids:
                bitmask[row, token // 32] |= 1 << (token % 32)
    index = bitmask.view(torch.uint8).view(rows, words * 4).long()  # little-endian bytes
    return torch.nn.functional.embedding(index, _BYTE_BIAS).view(rows, words * 32)


def json_grammar(model: Any, schema: dict[str, Any] | None) -> Grammar:
    """Any JSON object (`schema` None: response_format json_object) or one that fits `schema`."""
    LLMatcher = _llguidance().LLMatcher  # noqa: N806 - the library's class

    body = {"type": "object"} if schema is None else dict(schema)
    body["x-guidance"] = {**_COMPACT, **(body.get("x-guidance") or {})}
    try:
        grammar = LLMatcher.grammar_from_json_schema(body)
    except Exception as exc:  # noqa: BLE001 - the library's own message is the answer
        raise GrammarError(str(exc)) from None
    return Grammar(model, grammar, f"start: %json {json.dumps(body)}\n")


def tool_call_schema(tools: list[dict[str, Any]]) -> dict[str, Any]:
    """The JSON of one Hermes call to any of `tools` (OpenAI function definitions)."""
    options = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["name"]},
                "arguments": t.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    one = options[0] if len(options) == 1 else {"anyOf": options}
    return {**one, "x-guidance": _COMPACT}


def tool_call_grammar(
    model: Any, tools: list[dict[str, Any]], open_tag: str, close_tag: str
) -> Grammar:
    """Exactly one `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` block whose
    arguments fit the named function's parameter schema (tool_choice required or named)."""
    LLMatcher = _llguidance().LLMatcher  # noqa: N806 - the library's class

    lark = (
        f"start: {json.dumps(open_tag)} call {json.dumps(close_tag)}\n"
        f"call: %json {json.dumps(tool_call_schema(tools))}\n"
    )
    try:
        grammar = LLMatcher.grammar_from_lark(lark)
    except Exception as exc:  # noqa: BLE001 - the library's own message is the answer
        raise GrammarError(str(exc)) from None
    return Grammar(model, grammar, lark)

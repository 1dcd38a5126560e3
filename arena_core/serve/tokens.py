"""Token in, token out: vLLM's `POST /tokenize` and `POST /detokenize`, and prime-rl's
`POST /v1/chat/completions/tokens`, a chat request whose prompt comes as token ids.

A multi-turn RL client keeps each turn's prompt as the exact ids the model saw and sampled, and
adds only the new messages' tokens (verifiers' `OpenAIChatCompletionsTokenClient`, prime-rl's
rollouts). It renders the messages that came between two turns through `/tokenize`, puts them
after the previous turn's ids, and sends the whole sequence to `/v1/chat/completions/tokens`.
Rendering the whole conversation again instead can write a past turn differently from how it
was sampled (a tool call's compact JSON re-rendered with spaces), and the sequence a learner
trains on then stops extending from turn to turn.

`GET /tokenizer_info` (vLLM's) says which tokenizer that is: its special tokens and chat template,
which lm-evaluation-harness' remote tokenizer reads so that it tokenizes through `/tokenize`.

`/tokenize` renders messages as `/v1/chat/completions` renders them with tools or tool turns
(`chat.render_chat`: the model's template, tools through it or the Hermes fallback), so the ids
it returns are a prompt the chat route would decode from.
"""

from __future__ import annotations

from typing import Any

from arena_core.serve.answers import check_in_vocabulary
from arena_core.serve.chat import render_chat, tool_def
from arena_core.serve.models import ServedModel
from arena_core.serve.protocol import (
    ApiError,
    DetokenizeRequest,
    TokenizeRequest,
    check_continue,
)


def tokenize(model: ServedModel, req: TokenizeRequest) -> dict[str, Any]:
    """vLLM's `/tokenize` answer: `count`, `max_model_len`, `tokens` (and `token_strs`)."""
    tokenizer = model.tokenizer
    check_continue(req)
    try:
        if req.messages is not None:
            ids = render_chat(
                tokenizer,
                req.messages,
                [tool_def(t.function.model_dump(exclude_none=True)) for t in req.tools or []],
                model.tool_prompt,
                add_generation_prompt=req.add_generation_prompt,
                continue_final_message=req.continue_final_message,
            )
            if req.add_special_tokens:  # what the template wrote, plus the tokenizer's own
                ids = tokenizer.build_inputs_with_special_tokens(ids)
        else:
            special = True if req.add_special_tokens is None else req.add_special_tokens
            ids = tokenizer.encode(req.prompt or "", add_special_tokens=special)
    except Exception as exc:  # a template that rejects these roles
        raise ApiError(400, f"cannot apply the chat template: {exc}", param="messages") from None
    out: dict[str, Any] = {
        "count": len(ids),
        "max_model_len": model.context_length,
        "tokens": list(ids),
        "token_strs": tokenizer.convert_ids_to_tokens(list(ids)) if req.return_token_strs else None,
    }
    return out


def detokenize(model: ServedModel, req: DetokenizeRequest) -> dict[str, Any]:
    """vLLM's `/detokenize` answer: the text of `tokens`, special tokens included."""
    check_in_vocabulary(model, req.tokens, "tokens")
    return {"prompt": model.tokenizer.decode(req.tokens)}


def tokenizer_info(model: ServedModel) -> dict[str, Any]:
    """vLLM's `/tokenizer_info` answer: the tokenizer's class, special tokens, the context and
    the chat template the chat route renders with (null when the model has none)."""
    tokenizer = model.tokenizer
    info: dict[str, Any] = {"tokenizer_class": type(tokenizer).__name__}
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        token = getattr(tokenizer, name, None)
        info[name] = None if token is None else str(token)
    info["model_max_length"] = model.context_length
    info["chat_template"] = getattr(tokenizer, "chat_template", None)
    return info

"""Chat rows: an sft dataset's `messages` column (a list of `{"role", "content"}` turns).

Multi-turn chats are sft data too: SFT takes the loss on every assistant turn. This module only
checks and normalises the column (a list of dicts as JSONL, parquet and Hugging Face datasets
store it, or the same list as a JSON string, as a CSV cell holds it), so a bad row is reported
with its file, row and column before any model loads.

ShareGPT's turns (`{"from": "human"|"gpt"|"system"|..., "value": ...}`, as axolotl and
LLaMA-Factory read them) are turns too, their speakers named as the roles above (`SHAREGPT`).

OpenAI's chat fine-tuning files are read as they are written: a turn's content may be a list of
parts (its `text` parts, joined), the `developer` role is the system role (as the server reads
it, `arena_core.serve.chat`), and an assistant turn's `weight` of 0 keeps that turn as context
only, without loss (1, the default, trains on it).

An sft row in TRL's conversational prompt-completion form (`prompt` and `completion` both lists
of turns) is the chat of the two, its prompt's assistant turns of weight 0 (`prompt_completion`):
the loss falls on the completion only, as TRL trains it.

Preference rows in TRL's conversational form (`preference_pair`) are read too: `chosen` and
`rejected` as lists of turns ending with the assistant's answer, the turns before it (the same in
both) the prompt, as Hugging Face's UltraFeedback files write them beside a plain `prompt`; or a
`prompt` that is itself a list of turns, each answer a list holding the assistant turn.
"""

from __future__ import annotations

import json
from typing import Any

ROLES = ("system", "user", "assistant", "tool")
CHAT_COLUMN = "messages"
# ShareGPT's speakers -> roles
SHAREGPT = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "system": "system",
    "tool": "tool",
    "function_response": "tool",
    "observation": "tool",
}


def parse_messages(value: Any, where: str, row: int, column: str) -> list[dict[str, Any]]:
    """The turns of one row as `[{"role": ..., "content": ...}]`; raises ValueError naming the
    file, row and column (and the turn) when the value is not a chat with an assistant turn."""
    turns = _turns(value, f"dataset {where}, row {row}, column '{column}'")
    if not any(t["role"] == "assistant" and t.get("weight", 1) for t in turns):
        raise ValueError(
            f"dataset {where}, row {row}, column '{column}': no assistant turn with weight 1, so "
            "nothing to learn from"
        )
    return turns


def prompt_completion(
    prompt: Any, completion: Any, where: str, index: int, columns: tuple[str, str]
) -> list[dict[str, Any]]:
    """The chat of a conversational prompt-completion row (module docstring): the prompt's turns
    as context, the completion's as the turns that carry the loss. ValueError naming the row."""
    at = f"dataset {where}, row {index}"
    if not (isinstance(prompt, (list, tuple)) and isinstance(completion, (list, tuple))):
        raise ValueError(
            f"{at}: '{columns[0]}' and '{columns[1]}' must both be text or both lists of turns "
            f"(a conversation is sft data in a '{CHAT_COLUMN}' column)"
        )
    context = _turns(prompt, f"{at}, column '{columns[0]}'")
    answer = _turns(completion, f"{at}, column '{columns[1]}'")
    if not any(t["role"] == "assistant" for t in answer):
        raise ValueError(f"{at}, column '{columns[1]}': no assistant turn, so nothing to learn")
    quiet = [{**t, "weight": 0} if t["role"] == "assistant" else t for t in context]
    return quiet + answer


def preference_pair(
    row: dict[str, Any], where: str, index: int, columns: dict[str, str]
) -> tuple[str | list[dict[str, Any]], str, str]:
    """(prompt, chosen, rejected) of one preference row; the prompt is text, or the turns before
    the answers when the row is conversational (module docstring). `columns`: canonical name ->
    the user's column. Raises ValueError naming the row and column."""
    answers, contexts = {}, {}
    for name in ("chosen", "rejected"):
        value = row[columns[name]]
        if not isinstance(value, (list, tuple)):
            answers[name] = value if isinstance(value, str) else str(value)
            continue
        at = f"dataset {where}, row {index}, column '{columns[name]}'"
        turns = _turns(value, at)
        if turns[-1]["role"] != "assistant":
            raise ValueError(f"{at}: the last turn must be the assistant's answer")
        answers[name], contexts[name] = turns[-1]["content"], turns[:-1]
    prompt = row[columns["prompt"]]
    if isinstance(prompt, (list, tuple)):
        prompt = _turns(prompt, f"dataset {where}, row {index}, column '{columns['prompt']}'")
    elif not isinstance(prompt, str):
        prompt = str(prompt)
    given = [c for c in contexts.values() if c]
    if given:
        if len(given) != len(contexts) or given[0] != given[-1]:
            raise ValueError(
                f"dataset {where}, row {index}: '{columns['chosen']}' and "
                f"'{columns['rejected']}' must answer the same conversation (the turns before "
                "their last assistant turn differ)"
            )
        if isinstance(prompt, list) and prompt != given[0]:
            raise ValueError(
                f"dataset {where}, row {index}: the turns before the answers differ from "
                f"'{columns['prompt']}'; give the conversation once (in the prompt, or before "
                "each answer)"
            )
        prompt = given[0]
    if isinstance(prompt, list) and (not prompt or prompt[-1]["role"] == "assistant"):
        raise ValueError(
            f"dataset {where}, row {index}: the prompt's turns must end before the assistant's "
            "answer"
        )
    return prompt, answers["chosen"], answers["rejected"]


def _turns(value: Any, at: str) -> list[dict[str, Any]]:
    """A list of turns, checked and normalised (module docstring); ValueError naming `at`."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise ValueError(
                f"{at}: not a list of turns (a string that is not JSON). Write it as "
                '[{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}].'
            ) from None
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{at}: expected a non-empty list of turns, got {type(value).__name__}")
    turns = []
    for i, turn in enumerate(value):
        if isinstance(turn, dict) and "from" in turn and "value" in turn and "role" not in turn:
            speaker = turn["from"]
            if speaker not in SHAREGPT:
                raise ValueError(
                    f"{at}, turn {i}: unknown ShareGPT speaker {speaker!r}; speakers: "
                    f"{', '.join(SHAREGPT)}"
                )
            turn = {**turn, "role": SHAREGPT[speaker], "content": turn["value"]}
        if not isinstance(turn, dict) or "role" not in turn or "content" not in turn:
            raise ValueError(
                f"{at}, turn {i}: each turn needs 'role' and 'content' keys (or ShareGPT's "
                "'from' and 'value')"
            )
        role = "system" if turn["role"] == "developer" else turn["role"]
        if role not in ROLES:
            raise ValueError(f"{at}, turn {i}: unknown role {role!r}; roles: {', '.join(ROLES)}")
        parsed: dict[str, Any] = {
            "role": str(role),
            "content": _text(turn["content"], f"{at}, turn {i}"),
        }
        if "weight" in turn:
            if (
                role != "assistant"
                or turn["weight"] not in (0, 1)
                or isinstance(turn["weight"], bool)
            ):
                raise ValueError(
                    f"{at}, turn {i}: 'weight' is 0 or 1 on an assistant turn (0: context only, "
                    f"no loss), got {turn['weight']!r} on a {role} turn"
                )
            parsed["weight"] = int(turn["weight"])
        turns.append(parsed)
    return turns


def _text(content: Any, at: str) -> str:
    """A turn's text: a string, or OpenAI's list of content parts (`{"type": "text", "text":
    ...}`, joined); raises ValueError naming the turn for anything else (an image part)."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)) and content:
        texts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise ValueError(
                    f"{at}: a content part of type {kind!r}; only text parts "
                    '({"type": "text", "text": "..."}) are training data'
                )
            if not isinstance(part.get("text"), str):
                raise ValueError(f"{at}: a text part needs a string 'text'")
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(
        f"{at}: content must be text (or a list of text parts), got {type(content).__name__}"
    )

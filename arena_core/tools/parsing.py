"""Tool-call parsing: model text -> typed tool calls.

A parser finds the calls a model turn makes; every call gets one outcome, counted per step:
- `ok`: well formed, a known tool, arguments that fit its schema;
- `invalid_json`: the call block is not a JSON object with a string `name` (and, when present,
  an object `arguments`);
- `unclosed`: an opening tag without its closing tag (often: the turn ran out of tokens);
- `unknown_tool`: well formed, but no tool of that name exists;
- `bad_arguments`: a known tool, but the arguments do not fit its schema.
Anything but `ok` becomes a tool-role error message to the model (`error`), never an exception.

Hermes (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`, what Qwen2.5 and Qwen3 are
trained on) is built in. Other formats are plugins: a parser is any object with `name` and
`find(text) -> list[ToolCall]` (the syntactic outcomes: ok, invalid_json, unclosed), registered
with the `register_tool_parsers` hook and chosen by name (`env.tool_parser`); `check_calls` then
applies the tool-dependent outcomes the same way for every parser.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from arena_core.tools.python_session import argument_problems

OK = "ok"
INVALID_JSON = "invalid_json"
UNCLOSED = "unclosed"
UNKNOWN_TOOL = "unknown_tool"
BAD_ARGUMENTS = "bad_arguments"
OUTCOMES: tuple[str, ...] = (OK, INVALID_JSON, UNCLOSED, UNKNOWN_TOOL, BAD_ARGUMENTS)


@dataclass(frozen=True)
class ToolCall:
    """One call found in a model turn: its outcome, and what the model asked for."""

    outcome: str
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    error: str = ""  # why the call was refused, written for the model (empty when ok)

    @property
    def ok(self) -> bool:
        return self.outcome == OK


@runtime_checkable
class ToolCallParser(Protocol):
    """What a tool-call parser plugin provides."""

    name: str

    def find(self, text: str) -> list[ToolCall]:
        """Every call in `text`, in order, with outcome ok, invalid_json or unclosed."""
        ...


class HermesParser:
    """`<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks (Hermes, Qwen2.5/3)."""

    name = "hermes"
    open_tag, close_tag = "<tool_call>", "</tool_call>"

    def __init__(self) -> None:
        self._block = re.compile(
            re.escape(self.open_tag) + r"(.*?)" + re.escape(self.close_tag), re.DOTALL
        )

    def find(self, text: str) -> list[ToolCall]:
        calls: list[ToolCall] = []
        end = 0
        for match in self._block.finditer(text):
            calls.append(_from_json(match.group(1), match.group(0)))
            end = match.end()
        tail = text.find(self.open_tag, end)
        if tail >= 0:
            calls.append(
                ToolCall(
                    UNCLOSED,
                    raw=text[tail:],
                    error=f"Error: the tool call was not closed with {self.close_tag}.",
                )
            )
        return calls


def _from_json(body: str, raw: str) -> ToolCall:
    """A call from the JSON between the tags; structure problems are `invalid_json`."""
    try:
        obj = json.loads(body.strip())
    except json.JSONDecodeError as exc:
        return ToolCall(
            INVALID_JSON, raw=raw, error=f"Error: the tool call is not valid JSON ({exc})."
        )
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return ToolCall(
            INVALID_JSON,
            raw=raw,
            error='Error: a tool call must be a JSON object {"name": ..., "arguments": {...}}.',
        )
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            pass
    if not isinstance(args, dict):
        return ToolCall(
            BAD_ARGUMENTS,
            name=obj["name"],
            raw=raw,
            error=f"Error: the arguments of '{obj['name']}' must be a JSON object.",
        )
    return ToolCall(OK, name=obj["name"], arguments=args, raw=raw)


def check_calls(calls: list[ToolCall], tools: list[dict[str, Any]]) -> list[ToolCall]:
    """Apply the tool-dependent outcomes: unknown_tool and bad_arguments (by the schemas)."""
    by_name = {str(t.get("function", t).get("name")): t for t in tools}
    out = []
    for call in calls:
        if call.ok and call.name not in by_name:
            known = ", ".join(by_name) or "(none)"
            call = replace(
                call,
                outcome=UNKNOWN_TOOL,
                error=f"Error: unknown tool '{call.name}'. Available tools: {known}.",
            )
        elif call.ok:
            problems = argument_problems(by_name[call.name], call.arguments)
            if problems:
                call = replace(
                    call,
                    outcome=BAD_ARGUMENTS,
                    error=f"Error: bad arguments for '{call.name}': {'; '.join(problems)}.",
                )
        out.append(call)
    return out


def tool_call_parser(name: str) -> ToolCallParser:
    """The parser registered as `name` (hermes is built in); unknown names list the installed."""
    if name == HermesParser.name:
        return HermesParser()
    from arena_core.plugin_loader import get_plugins

    entry = get_plugins().registries.tool_parsers.get(name)
    obj = entry.obj
    return obj() if isinstance(obj, type) or not hasattr(obj, "find") else obj

"""Plain Python functions as an episode's tools (the counterpart of verifiers' ToolEnv).

`PythonToolSession([add, lookup])` serves each function under its name; its JSON schema comes
from the signature (type hints -> JSON types, parameters without defaults are required) and the
first paragraph of its docstring, unless `schemas` declares one. Arguments are checked against
the schema before the call, so a wrong call is an error message for the model, never an
exception in the runtime; a function that raises or runs past its timeout is an error result too.
Functions may keep per-episode state in the `state` dict the session was given (the task opens
one session per episode); `final_state()` hands a copy to the reward.
"""

from __future__ import annotations

import copy
import inspect
import threading
import typing
from collections.abc import Callable
from typing import Any

from arena_core.tools.protocol import ToolResult, function_schema

_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    dict: "object",
}
_PY_CHECK: dict[str, tuple[type, ...]] = {
    "integer": (int,),
    "number": (int, float),
    "string": (str,),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


def schema_of(fn: Callable[..., Any]) -> dict[str, Any]:
    """The OpenAI-format schema of `fn`, derived from its signature and docstring."""
    hints = typing.get_type_hints(fn)
    props: dict[str, Any] = {}
    required: list[str] = []
    for name, param in inspect.signature(fn).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = typing.get_origin(hints.get(name)) or hints.get(name)
        json_type = _JSON_TYPES.get(hint)
        props[name] = {"type": json_type} if json_type else {}
        if param.default is inspect.Parameter.empty:
            required.append(name)
    doc = inspect.getdoc(fn) or ""
    description = doc.split("\n\n")[0].replace("\n", " ").strip() or fn.__name__
    params = {"type": "object", "properties": props, "required": required}
    return function_schema(fn.__name__, description, params)


def argument_problems(schema: dict[str, Any], arguments: Any) -> list[str]:
    """Why `arguments` do not fit a tool's schema (missing, unknown or mistyped), as sentences."""
    if not isinstance(arguments, dict):
        return [f"arguments must be a JSON object, got {type(arguments).__name__}"]
    params = schema.get("function", schema).get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = params.get("required") or []
    problems = [f"missing required argument '{k}'" for k in required if k not in arguments]
    for key, value in arguments.items():
        if key not in props:
            if params.get("additionalProperties", False) is False:
                problems.append(f"unknown argument '{key}' (expected: {', '.join(props)})")
            continue
        expected = props[key].get("type")
        kinds = _PY_CHECK.get(expected) if isinstance(expected, str) else None
        bad_bool = isinstance(value, bool) and expected in ("integer", "number")
        if kinds and (not isinstance(value, kinds) or bad_bool):
            problems.append(f"argument '{key}' must be {expected}, got {type(value).__name__}")
    return problems


class PythonToolSession:
    """A ToolSession over Python callables (see the module docstring)."""

    def __init__(
        self,
        functions: list[Callable[..., Any]] | dict[str, Callable[..., Any]],
        *,
        schemas: dict[str, dict[str, Any]] | None = None,
        state: dict[str, Any] | None = None,
    ) -> None:
        fns = functions if isinstance(functions, dict) else {f.__name__: f for f in functions}
        self._fns = dict(fns)
        self._schemas = {
            name: (schemas or {}).get(name) or schema_of(fn) for name, fn in fns.items()
        }
        for name, schema in self._schemas.items():  # a declared schema names its own tool
            schema.setdefault("function", {})["name"] = name
        self.state = state if state is not None else {}
        self.calls = 0

    def tools(self) -> list[dict[str, Any]]:
        return [copy.deepcopy(s) for s in self._schemas.values()]

    def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> ToolResult:
        self.calls += 1
        fn = self._fns.get(name)
        if fn is None:
            known = ", ".join(self._fns) or "(none)"
            return ToolResult(f"Error: unknown tool '{name}'. Available tools: {known}.", True)
        problems = argument_problems(self._schemas[name], arguments)
        if problems:
            return ToolResult(f"Error: bad arguments for '{name}': {'; '.join(problems)}.", True)
        return _run_with_timeout(fn, arguments, timeout_s, name)

    def final_state(self) -> dict[str, Any]:
        return copy.deepcopy(self.state)

    def close(self) -> None:
        """Nothing to release: the functions live in this process."""


def _run_with_timeout(
    fn: Callable[..., Any], arguments: dict[str, Any], timeout_s: float, name: str
) -> ToolResult:
    """Call `fn` in a daemon thread so a hung tool costs the episode `timeout_s`, not the run.
    (A thread cannot be killed: a tool that can hang for good belongs in an MCP server.)"""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(**arguments)
        except Exception as exc:  # the tool's own failure is the model's information
            box["error"] = str(exc) or type(exc).__name__

    thread = threading.Thread(target=target, daemon=True, name=f"tool-{name}")
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return ToolResult(f"Error: tool '{name}' timed out after {timeout_s:g}s.", True)
    if "error" in box:  # the message only, as an MCP server's error result carries it
        return ToolResult(f"Error: {box['error']}", True)
    value = box.get("value")
    return ToolResult(value if isinstance(value, str) else _to_text(value))


def _to_text(value: Any) -> str:
    import json

    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return str(value)

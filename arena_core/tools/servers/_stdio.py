"""A minimal MCP server over stdio (JSON-RPC 2.0, one message per line), standard library only.

Why not the SDK's `MCPServer`: start-up time. A stateful task starts one server per episode, and
importing the SDK costs about a second on a 2-core machine; this module starts in tens of
milliseconds. It implements what a tool server needs: `initialize` (handshake revisions),
`ping`, `tools/list`, `tools/call`, notifications ignored, unknown methods answered with
JSON-RPC error -32601. Arguments are checked against each tool's input schema (required keys,
JSON types, no unknown keys) before the handler runs; a bad call or a handler that raises is an
`isError` result, never a dead server.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
_TYPES: dict[str, tuple[type, ...]] = {
    "number": (int, float),
    "integer": (int,),
    "string": (str,),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
}


class ToolError(Exception):
    """Raised by a handler: its message becomes the text of an `isError` result."""


@dataclass
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    handler: Callable[..., Any]

    def listing(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "inputSchema": self.input_schema,
        }


def argument_errors(schema: dict[str, Any], arguments: Any) -> list[str]:
    """Why `arguments` do not fit a flat object schema (required, types, unknown keys)."""
    if not isinstance(arguments, dict):
        return [f"arguments must be an object, got {type(arguments).__name__}"]
    props = schema.get("properties", {})
    errors = [
        f"missing required argument '{k}'" for k in schema.get("required", []) if k not in arguments
    ]
    for key, value in arguments.items():
        if key not in props:
            errors.append(f"unknown argument '{key}' (expected: {', '.join(props) or 'none'})")
            continue
        expected = props[key].get("type")
        kinds = _TYPES.get(expected, ())
        if kinds and (
            not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds)
        ):
            errors.append(f"argument '{key}' must be a {expected}, got {json.dumps(value)[:40]}")
    return errors


class StdioServer:
    """Tools by name, served on stdin/stdout until stdin closes."""

    def __init__(self, name: str, version: str = "1.0") -> None:
        self.name, self.version = name, version
        self.tools: dict[str, Tool] = {}
        # called with a tools/call request's `_meta` (may be empty) before its handler runs:
        # a stateful server selects the episode's state from it (episode_state=tagged)
        self.on_meta: Callable[[dict[str, Any]], None] | None = None

    def tool(self, name: str, description: str, properties: dict[str, Any]) -> Callable:
        """Decorator: register `fn(**arguments)` as tool `name`; every property is required."""
        schema = {
            "type": "object",
            "properties": properties,
            "required": [k for k, v in properties.items() if "default" not in v],
            "additionalProperties": False,
        }

        def register(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.tools[name] = Tool(name, description, schema, fn)
            return fn

        return register

    def handle(self, message: dict[str, Any]) -> dict[str, Any] | None:
        """The response to one message (None for a notification)."""
        method, msg_id = message.get("method"), message.get("id")
        if msg_id is None:
            return None
        params = message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            result: dict[str, Any] = {
                "protocolVersion": asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1],
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": self.name, "version": self.version},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": [t.listing() for t in self.tools.values()]}
        elif method == "tools/call":
            meta = params.get("_meta")
            meta = meta if isinstance(meta, dict) else {}
            result = self.call(str(params.get("name")), params.get("arguments") or {}, meta)
        else:
            error = {"code": -32601, "message": f"method not found: {method}"}
            return {"jsonrpc": "2.0", "id": msg_id, "error": error}
        return {"jsonrpc": "2.0", "id": msg_id, "result": result}

    def call(self, name: str, arguments: Any, meta: dict[str, Any] | None = None) -> dict[str, Any]:
        tool = self.tools.get(name)
        if tool is None:
            return _text(f"unknown tool '{name}'; tools: {', '.join(self.tools)}", error=True)
        errors = argument_errors(tool.input_schema, arguments)
        if errors:
            return _text(f"bad arguments for '{name}': {'; '.join(errors)}", error=True)
        try:
            if self.on_meta is not None:
                self.on_meta(meta or {})
            value = tool.handler(**arguments)
        except ToolError as exc:
            return _text(str(exc), error=True)
        except Exception as exc:  # noqa: BLE001 - a tool's bug is an error result, not a dead server
            return _text(f"{name} failed: {type(exc).__name__}: {exc}", error=True)
        return _text(value if isinstance(value, str) else json.dumps(value))

    def run(self) -> None:
        """Serve until stdin closes (the client's shutdown signal)."""
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                reply: dict[str, Any] | None = {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": -32700, "message": "parse error"},
                }
            else:
                reply = self.handle(message) if isinstance(message, dict) else None
            if reply is not None:
                sys.stdout.write(json.dumps(reply) + "\n")
                sys.stdout.flush()


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}

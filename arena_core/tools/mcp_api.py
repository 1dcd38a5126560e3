"""The one place Arena imports the `mcp` SDK; mcp 1.x (>= 1.24) and 2.x both work through it.

Why both: the packages users install next to Arena pin different generations (verifiers 0.3
requires `mcp>=1.24,<2`, verifiers 0.4 pins `mcp==2.0.0`, others want the newest 2.x), and a
user must not have to choose between one of those and Arena's MCP environments.

What differs between the generations, and how Arena stays on the common ground:

- wire types: 2.x moved them to the `mcp_types` package and mirrors it as `mcp.types`; 1.x has
  only `mcp.types`. Arena imports `mcp.types` (`types` here), never `mcp_types`.
- field names: 1.x models have camelCase attributes (`isError`, `nextCursor`), 2.x snake_case
  ones with camelCase aliases. Arena reads a model through `wire(model)` (its JSON-RPC form,
  camelCase in both) and builds one with camelCase keywords (both validate by alias).
- the error a JSON-RPC error answer raises: `McpError` (1.x), `MCPError` (2.x): `MCPError` here.
- the low-level server: 1.x registers handlers with decorators, 2.x takes them as constructor
  arguments (`on_list_tools`, `on_call_tool`): `serve_stdio` runs either.

The client side (`ClientSession`, `stdio_client`, `streamable_http_client`, `call_tool(...,
meta=...)`, `list_tools(params=...)`) has the same shape in both and is re-exported as it is.
Importing this module raises ImportError when `mcp` is missing or older than 1.24.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any

MIN_VERSION = (1, 24)


def _installed_version() -> str:
    try:
        return importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:  # a source checkout on the path
        return "0"


SDK_VERSION = _installed_version()
_parts = tuple(int(p) for p in (SDK_VERSION.split(".") + ["0"])[:2] if p.isdigit())
if SDK_VERSION != "0" and _parts < MIN_VERSION:
    raise ImportError(
        f"mcp {SDK_VERSION} is installed; Arena's MCP support needs mcp 1.24 or later (1.x or "
        f"2.x): pip install -U 'mcp>=1.24'"
    )

import mcp  # noqa: E402 - after the version check: an older mcp lacks what follows
import mcp.types as types  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

#: the generation installed: 2 has `MCPError`, `mcp_types` and constructor-argument handlers
GENERATION = 2 if hasattr(mcp, "MCPError") else 1
#: raised by a call whose answer is a JSON-RPC error (`exc.error.code`, `exc.error.message`)
MCPError: type[Exception] = getattr(mcp, "MCPError", None) or mcp.McpError  # type: ignore[attr-defined]
#: the error code the SDK gives a request whose connection closed under it
CONNECTION_CLOSED: int = types.CONNECTION_CLOSED

#: a call handler of `serve_stdio`: (tool name, arguments, the request's `_meta`) -> (text, is_error)
CallHandler = Callable[[str, dict[str, Any], dict[str, Any] | None], Awaitable[tuple[str, bool]]]


def wire(model: Any) -> dict[str, Any]:
    """`model` (an SDK type) as its JSON-RPC dict: camelCase keys, unset fields left out."""
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


def page_params(cursor: str | None) -> Any:
    """The `params` of a `list_tools` call for the page at `cursor` (None: the first page)."""
    return types.PaginatedRequestParams(cursor=cursor) if cursor else None


def _meta_dict(meta: Any) -> dict[str, Any] | None:
    """A request's `_meta` as a dict (1.x gives a model with extra fields, 2.x a dict)."""
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta
    return meta.model_dump(by_alias=True, exclude_none=True)


async def serve_stdio(
    name: str, listing: Callable[[], list[dict[str, Any]]], call: CallHandler
) -> None:
    """Serve the tools `listing()` returns (MCP tool dicts: `name`, `description`,
    `inputSchema`) on stdin/stdout until stdin closes, with the SDK's low-level server: the
    schemas come from elsewhere and `call` checks the arguments itself, so the SDK validates
    nothing on its behalf."""
    from mcp.server.lowlevel import Server
    from mcp.server.stdio import stdio_server

    def tools() -> list[Any]:
        return [
            types.Tool(
                name=t["name"], description=t.get("description"), inputSchema=t["inputSchema"]
            )
            for t in listing()
        ]

    def result(text: str, is_error: bool) -> Any:
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=text)], isError=is_error
        )

    if GENERATION == 2:  # handlers are constructor arguments

        async def on_list_tools(ctx: Any, params: Any) -> Any:
            return types.ListToolsResult(tools=tools())

        async def on_call_tool(ctx: Any, params: Any) -> Any:
            arguments = dict(params.arguments or {})
            return result(*await call(params.name, arguments, _meta_dict(params.meta)))

        server = Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    else:  # 1.x: handlers are registered with decorators
        server = Server(name)

        @server.list_tools()
        async def list_tools() -> list[Any]:
            return tools()

        @server.call_tool(validate_input=False)
        async def call_tool(tool: str, arguments: dict[str, Any]) -> Any:
            meta = _meta_dict(server.request_context.meta)
            return result(*await call(tool, dict(arguments or {}), meta))

    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


__all__ = [
    "CONNECTION_CLOSED",
    "MCPError",
    "MIN_VERSION",
    "SDK_VERSION",
    "GENERATION",
    "CallHandler",
    "ClientSession",
    "StdioServerParameters",
    "page_params",
    "serve_stdio",
    "stdio_client",
    "streamable_http_client",
    "types",
    "wire",
]

"""The calculator MCP server: `python -m arena_core.tools.servers.calculator` (stdio, stateless).

Four tools, add, sub, mul and div, each taking numbers `a` and `b`; division by zero is an error
result. Results are written as integers when they are whole (`7`, not `7.0`), so a model can copy
a tool's answer into its own.
"""

from __future__ import annotations

from arena_core.tools.servers._stdio import StdioServer, ToolError

NUMBERS = {
    "a": {"type": "number", "description": "first operand"},
    "b": {"type": "number", "description": "second operand"},
}
server = StdioServer("arena-calculator")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(round(value, 10))


@server.tool("add", "Add two numbers: a + b.", NUMBERS)
def add(a: float, b: float) -> str:
    return _number(a + b)


@server.tool("sub", "Subtract b from a: a - b.", NUMBERS)
def sub(a: float, b: float) -> str:
    return _number(a - b)


@server.tool("mul", "Multiply two numbers: a * b.", NUMBERS)
def mul(a: float, b: float) -> str:
    return _number(a * b)


@server.tool("div", "Divide a by b: a / b (b must not be 0).", NUMBERS)
def div(a: float, b: float) -> str:
    if b == 0:
        raise ToolError("division by zero: b must not be 0")
    return _number(a / b)


if __name__ == "__main__":
    server.run()

"""A stdio MCP server with one tool (test fixture): MCPEnv starts it as `python server.py`."""

from mcp.server.fastmcp import FastMCP

server = FastMCP("adder")


@server.tool()
def add_numbers(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


if __name__ == "__main__":
    server.run("stdio")

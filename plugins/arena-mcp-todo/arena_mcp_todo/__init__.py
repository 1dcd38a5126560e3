"""arena-mcp-todo: a to-do list MCP server, its environment and reward, as an Arena plugin."""

__version__ = "0.1.0"

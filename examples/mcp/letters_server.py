"""An MCP server of one's own, in the mcp 2.x API that `pip install -e '.[mcp]'` brings."""

from mcp.server.mcpserver import MCPServer  # 1.x: from mcp.server.fastmcp import FastMCP

app = MCPServer("letters", log_level="WARNING")


@app.tool()
def count_letter(word: str, letter: str) -> int:
    """How many times `letter` occurs in `word` (case-insensitive)."""
    return word.lower().count(letter.lower())


if __name__ == "__main__":
    app.run()  # over stdio: Arena starts it as `python letters_server.py`

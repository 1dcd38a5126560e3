"""A classic verifiers MCPEnv (test fixture): its tool comes from a local stdio MCP server
(server.py, FastMCP) that MCPEnv itself starts as `python server.py` when it is built, lists the
tools of, and calls in its rollout. Offline: the server is this package's own file."""

import sys
from pathlib import Path

import verifiers as vf
from datasets import Dataset

SERVER = str(Path(__file__).with_name("server.py"))


def load_environment(max_turns: int = 2):
    rows = [
        {"question": f"Use the add_numbers tool: {i} + 7", "answer": str(i + 7)} for i in range(12)
    ]

    def answered(completion, answer) -> float:
        return 1.0 if answer in (completion[-1].content or "") else 0.0

    def tool_calls(completion) -> float:
        return float(sum(len(m.tool_calls or []) for m in completion if m.role == "assistant"))

    return vf.MCPEnv(
        mcp_servers=[{"name": "adder", "command": sys.executable, "args": [SERVER]}],
        dataset=Dataset.from_list(rows[:8]),
        eval_dataset=Dataset.from_list(rows[8:]),
        rubric=vf.Rubric(funcs=[answered, tool_calls], weights=[1.0, 0.0]),
        max_turns=max_turns,
    )

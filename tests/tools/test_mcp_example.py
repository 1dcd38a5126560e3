"""docs/tools-mcp.md's MCP server of one's own (examples/mcp/, the mcp 2.x `MCPServer` API), exactly
as that page runs it: `arena validate env --mcp-command ...` passes, and a 1-step GRPO run through
`arena-run` trains on it. The policy's turns come from a scripted agent (as in
test_mcp_plugin.py: the tiny model never calls a tool) that asks the server on every other
episode; the server, the episode runner, the sandboxed reward and the loop are the real ones.
"""

from __future__ import annotations

import csv
import json
import re
import sys
from pathlib import Path

import pytest

from arena_core.cli import run as arena_run
from arena_core.cli.main import main as arena
from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins

from .conftest import ScriptedPolicy, text_ids

pytest.importorskip("mcp")
# the example server is written with mcp 2.x's `MCPServer` (1.x calls it `FastMCP`)
pytest.importorskip("mcp.server.mcpserver")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mcp"
SERVER = EXAMPLE / "letters_server.py"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "tools-mcp.md"


def test_the_docs_show_this_file_with_the_2x_api() -> None:
    """The docs page's server is the file (after its docstring), line for line."""
    page = DOCS.read_text()
    section = page.split("\n## An MCP server of your own\n", 1)[1]
    shown = section.split("```python\n", 1)[1].split("```", 1)[0]
    code = SERVER.read_text().split('"""', 2)[2].lstrip("\n")
    assert shown == code
    assert "from mcp.server.mcpserver import MCPServer" in code
    assert f'--mcp-command "python examples/mcp/{SERVER.name}"' in section


def test_the_example_server_validates(capsys) -> None:
    assert arena(["validate", "env", "--mcp-command", f"{sys.executable} {SERVER}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS", report
    (tools,) = [c for c in report["checks"] if c["name"] == "tools"]
    assert "count_letter" in tools["detail"]


def _agent(tok):
    """Ask the server on every other episode and answer its count; the others guess 0."""
    episodes = iter(range(10**9))

    def script(prompt: list[int], turn: int) -> list[int]:
        text = tok.decode(prompt)
        if "<|im_start|>tool" in text:  # the server answered: say its number
            count = re.findall(r"\d+", text.rsplit("<|im_start|>tool", 1)[1])[0]
            return text_ids(tok, f"The letter occurs {count} times.")
        if next(episodes) % 2:
            return text_ids(tok, "It occurs 0 times.")
        letter, word = re.findall(r"'([^']+)'", text.rsplit("<|im_start|>user", 1)[1])[:2]
        call = {"name": "count_letter", "arguments": {"word": word, "letter": letter}}
        return text_ids(tok, f"<tool_call>{json.dumps(call)}</tool_call>")

    return script


class _ScriptedLettersAgent:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "scripted-letters-agent",
            lambda policy, cfg: ScriptedPolicy(policy.tokenizer, _agent(policy.tokenizer)),
        )


def test_grpo_trains_one_step_on_the_example(tmp_path: Path, no_leftover_children) -> None:
    plugins = get_plugins()
    plugins.add(_ScriptedLettersAgent(), "test-scripted-letters-agent")
    try:
        rc = arena_run.main(
            [
                "+algo=grpo",
                "+env=mcp",
                f"env.command={sys.executable} {SERVER}",
                f"env.path={EXAMPLE / 'letters.jsonl'}",
                f"env.reward={EXAMPLE / 'letters_reward.py'}",
                "model.name_or_path=arena:tiny-init",
                "model.lora.r=0",
                "backend.name=scripted-letters-agent",
                "algo.group_size=2",
                "algo.beta=0.0",
                "train.max_steps=1",
                "train.prompts_per_step=1",
                "train.max_sampling_rounds=1",
                "train.checkpoint_every=0",
                "generation.max_new_tokens=200",
                "eval.num_prompts=2",
                "sandbox.workers=1",
                "runtime.threads=1",
                "runtime.progress=lines",
                "logger.names=[csv]",
                f"paths.runs={tmp_path}",
            ]
        )
    finally:
        plugins.remove("test-scripted-letters-agent")
    assert rc == 0
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    (row,) = list(csv.DictReader((run_dir / "metrics.csv").open()))
    # the episode that asked the server answered its count (reward 1.0), the guess scored 0
    assert float(row["reward/mean"]) == pytest.approx(0.5)
    assert float(row["tools/calls"]) == 1 and float(row["reward/failures"]) == 0
    assert float(row["groups/kept"]) == 1  # the group disagreed: the step learned

"""The third-party MCP env plugin (plugins/arena-mcp-todo), through the whole entry-point path.

It is pip-installed into this environment (once, when missing), found through its entry point,
checked by its own tests (Arena's `MCPEnvConformance`, subclassed, in a nested pytest session),
and trained with GRPO by the real runtime: multi-turn episodes against its SDK-written server,
the sandboxed reward reading each episode's database through `state`; one server process
(the env's `tagged` episode state) serves every episode. The policy's turns come
from a scripted agent (tests/tools/conftest.py) that does the job on every other episode, so
groups disagree and the reward's signal is visible in the metrics.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from pathlib import Path

import psutil
import pytest

from arena_core.hookspecs import Register, hookimpl
from arena_core.llm_rl.recipe import run_training
from arena_core.plugin_loader import get_plugins

from .conftest import ScriptedPolicy, text_ids

pytest.importorskip("mcp")
# the plugin's server is written with mcp 2.x's `MCPServer` (1.x calls it `FastMCP`)
pytest.importorskip("mcp.server.mcpserver")

PLUGIN_DIR = Path(__file__).resolve().parents[2] / "plugins" / "arena-mcp-todo"


@pytest.fixture(scope="session")
def todo_installed(install_local_plugin) -> str:
    """plugins/arena-mcp-todo, installed (editable, no deps) unless this venv has it; its
    version."""
    return install_local_plugin("arena-mcp-todo")


def test_the_plugin_registers_its_env_and_reward(todo_installed: str) -> None:
    registries = get_plugins().registries
    entry = registries.envs.get("todo")
    assert entry.distribution == "arena-mcp-todo"
    assert registries.rewards.get("todo_items").distribution == "arena-mcp-todo"


def test_the_plugins_own_conformance_tests_pass(todo_installed: str) -> None:
    tests = PLUGIN_DIR / "tests"
    stale = [n for n in sys.modules if n.rpartition(".")[2] == "test_conformance"]
    saved = {n: sys.modules.pop(n) for n in stale}  # other plugins' modules of the same name
    try:
        code = pytest.main([str(tests), "-q", "-p", "no:cacheprovider", "--import-mode=importlib"])
    finally:
        for name in [n for n in sys.modules if n.rpartition(".")[2] == "test_conformance"]:
            sys.modules.pop(name)
        sys.modules.update(saved)
    assert code == 0, "plugins/arena-mcp-todo/tests failed (output above)"


SERVERS_SEEN: set[int] = set()  # PIDs of the plugin's server processes alive at any turn


def _agent(tok):
    """Add the requested items on every other episode; say "Done." after the tool answers."""
    episodes = iter(range(10**9))

    def script(prompt: list[int], turn: int) -> list[int]:
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "arena_mcp_todo.server" in " ".join(proc.cmdline()):
                    SERVERS_SEEN.add(proc.pid)
        text = tok.decode(prompt)
        if text.rstrip().endswith("assistant") and "<|im_start|>tool" in text:
            return text_ids(tok, "Done.")
        question = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        if next(episodes) % 2:
            return text_ids(tok, "Done.")  # claims it, did nothing: the database says 0
        items = question.removeprefix("Add ").removesuffix(" to my to-do list.")
        titles = items.replace(" and ", ", ").split(", ")
        calls = "".join(
            f"<tool_call>{json.dumps({'name': 'add_item', 'arguments': {'title': t}})}</tool_call>"
            for t in titles
        )
        return text_ids(tok, calls)

    return script


class _ScriptedBackendPlugin:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "scripted-todo-agent",
            lambda policy, cfg: ScriptedPolicy(policy.tokenizer, _agent(policy.tokenizer)),
        )


def test_grpo_trains_on_the_plugin_env_through_its_entry_point(
    tmp_path: Path, todo_installed: str, no_leftover_children
) -> None:
    plugins = get_plugins()
    plugins.add(_ScriptedBackendPlugin(), "test-scripted-todo-agent")
    cfg = {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 600, "temperature": 1.0},
        "train": {
            "max_steps": 1,
            "prompts_per_step": 1,
            "checkpoint_every": 0,
            "micro_batch_tokens": 4096,
            "max_sampling_rounds": 1,
        },
        "eval": {"num_prompts": 2, "every": 0},
        "runtime": {"progress": "lines", "threads": 1},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "backend": {"name": "scripted-todo-agent"},
        "algo": {"name": "grpo", "group_size": 2, "lr": 1e-3, "beta": 0.0},
        "env": {"name": "todo", "max_items": 2},
    }
    try:
        run_dir = run_training(cfg)
    finally:
        plugins.remove("test-scripted-todo-agent")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    (row,) = list(csv.DictReader((run_dir / "metrics.csv").open()))
    # one episode added the items (the reward read them from its database: 1.0), one did not
    assert float(row["reward/mean"]) == pytest.approx(0.5)
    assert float(row["reward/failures"]) == 0 and float(row["groups/kept"]) == 1
    assert float(row["tools/episodes_with_call"]) == 1 and float(row["tools/calls"]) >= 1
    assert float(row["tokens/tool"]) > 0  # the tool answers are in the episode, masked
    for ev in summary["evals"]:
        assert ev["eval/reward_mean"] == pytest.approx(0.5)  # the eval reads the database too
    # the env's default episode_state (tagged): one SDK server process served every episode,
    # training and evaluation, each with its own database
    assert len(SERVERS_SEEN) == 1, SERVERS_SEEN

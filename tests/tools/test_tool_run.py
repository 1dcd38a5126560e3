"""GRPO on the built-in tool task through the real runtime (`run_training`).

The policy's turns come from a scripted agent registered as a backend plugin (it calls the
calculator on some rows and guesses on others, so groups disagree); everything else is the real
run: the tool_calc env with its calculator (in process, or its MCP server counted in real
processes), multi-turn episodes, the sandboxed
reward, group advantages, the learner training the tiny model on the masked episodes, the
held-out evaluation and the metrics files.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
from pathlib import Path

import psutil
import pytest

from arena_core.hookspecs import Register, hookimpl
from arena_core.llm_rl.recipe import run_training
from arena_core.plugin_loader import get_plugins

from .conftest import ScriptedPolicy, text_ids

_NUM = re.compile(r"\d+")


CALCULATORS: set[int] = set()  # PIDs of calculator server processes alive at any turn


def _calculator_pids() -> set[int]:
    """This process's descendants running the calculator MCP server (env.tools=mcp)."""
    pids = set()
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "arena_core.tools.servers.calculator" in " ".join(proc.cmdline()):
                pids.add(proc.pid)
    return pids


def _agent(tok):
    """Copy the tool's answer when there is one; else call the tool on every other row."""

    rows = iter(range(10**9))

    def script(prompt: list[int], turn: int) -> list[int]:
        CALCULATORS.update(_calculator_pids())
        text = tok.decode(prompt)
        last = text.rsplit("<|im_start|>", 2)
        if len(last) == 3 and last[1].startswith("tool\n"):
            return text_ids(tok, f"<answer>{last[1][5:].split('<|im_end|>')[0]}</answer>")
        question = text.split("<|im_start|>user\n", 1)[1].split("<|im_end|>")[0]
        a, b = (int(x) for x in _NUM.findall(question)[:2])
        op = "sub" if ("minus" in question or "away" in question or " - " in question) else "add"
        if next(rows) % 2:  # every other row guesses: half of each group, half of the eval
            return text_ids(tok, "<answer>7</answer>")
        call = json.dumps({"name": op, "arguments": {"a": a, "b": b}})
        return text_ids(tok, f"<tool_call>{call}</tool_call>")

    return script


class _ScriptedBackendPlugin:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "scripted-agent",
            lambda policy, cfg: ScriptedPolicy(policy.tokenizer, _agent(policy.tokenizer)),
        )


@pytest.fixture
def scripted_backend():
    plugins = get_plugins()
    plugins.add(_ScriptedBackendPlugin(), "test-scripted-agent")
    try:
        yield "scripted-agent"
    finally:
        plugins.remove("test-scripted-agent")


@pytest.mark.parametrize(("mode", "tools"), [("sync", "python"), ("async", "mcp")])
def test_grpo_on_the_tool_task_runs_multi_turn_episodes(
    mode: str, tools: str, tmp_path: Path, scripted_backend: str, no_leftover_children
) -> None:
    """Both runtimes, with the calculator in process and as its MCP server: with mcp, one
    server process (env.episode_state=shared, its default) serves all 28 episodes."""
    CALCULATORS.clear()
    cfg = {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny-init", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 160, "temperature": 1.0},
        "train": {
            "max_steps": 2,
            "prompts_per_step": 2,
            "checkpoint_every": 0,
            "micro_batch_tokens": 4096,
            "max_sampling_rounds": 1,
        },
        "eval": {"num_prompts": 6, "every": 0},
        "runtime": {"progress": "lines", "threads": 1, "mode": mode, "max_staleness": 1},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "backend": {"name": scripted_backend},
        "algo": {"name": "grpo", "group_size": 4, "lr": 1e-3, "beta": 0.0},
        "env": {"name": "tool_calc", "tools": tools},
    }
    run_dir = run_training(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    assert len(rows) == 2
    for row in rows:
        assert float(row["tools/call_rate"]) == 0.5
        assert float(row["tools/parse/ok"]) == float(row["tools/calls"]) > 0
        assert float(row["tools/parse_error_rate"]) == 0.0
        assert float(row["tokens/tool"]) > 0
        # the calls answer correctly, the guesses do not: every group has signal and trains
        assert float(row["groups/kept"]) == 2 and float(row["tokens/trained"]) > 0
        assert float(row["reward/failures"]) == 0
    for ev in summary["evals"]:
        assert ev["eval/tools/call_rate"] == 0.5
        # on held-out problems the rows that called the calculator are exactly the correct ones
        assert ev["eval/accuracy"] == pytest.approx(0.5)
    sample = summary["eval_samples_final"][0]["completion"]
    assert "<answer>" in sample
    assert len(CALCULATORS) == (1 if tools == "mcp" else 0), CALCULATORS

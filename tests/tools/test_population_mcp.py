"""A population (two members, selection after every step) trained on an MCP env through `arena-run`.

The env is the built-in `+env=mcp` over the stateful key-value server (one `tagged` process for
every episode, each episode its own SQLite store under the env's state directory, in /tmp). The
reward file opens the episode's store: it scores 1.0 only when it can read the word the episode
stored, so a reward sandbox that was not shown the env's state directories (the private /tmp
hides them: `expose=`) scores every episode 0. The policy's turns come from a scripted agent
(tests/tools/conftest.py: the tiny model never calls a tool) that stores the word on every other
episode; the server, the episode runner, the sandboxed reward, the population loop and its
selections are the real ones. The members' fitness is measured on tool episodes too (as a single
run evaluates), and at the end the server must be stopped (`task.close()`): the test fails on
any child process left behind.
"""

from __future__ import annotations

import contextlib
import csv
import json
import re
import sys
from pathlib import Path

import psutil
import pytest

from arena_core.cli import run as arena_run
from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins

from .conftest import ScriptedPolicy, text_ids

pytest.importorskip("mcp")

SERVER = "arena_core.tools.servers.kv_store"
WORDS = ["apple", "river", "stone", "cloud", "maple", "tiger", "piano", "lemon"]
REWARD = """\
import os
import sqlite3


def reward(question, answer, completion, state=None):
    '''1.0 when the episode's store (in its state directory) holds the answer word.'''
    path = os.path.join((state or {}).get("state_dir") or "/nonexistent", "kv.sqlite")
    if not os.path.exists(path):
        return 0.0  # not stored, or the sandbox cannot see the env's state directories
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        values = [v for (v,) in conn.execute("SELECT value FROM kv")]
    finally:
        conn.close()
    return 1.0 if answer in values else 0.0
"""

SERVERS_SEEN: set[int] = set()  # PIDs of the kv server processes alive at any model turn


def _agent(tok):
    """Store the word on every other episode (so each group of two disagrees); "Done." else."""
    episodes = iter(range(10**9))

    def script(prompt: list[int], turn: int) -> list[int]:
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if SERVER in " ".join(proc.cmdline()):
                    SERVERS_SEEN.add(proc.pid)
        text = tok.decode(prompt)
        if "<|im_start|>tool" in text:  # the server answered: the episode is done
            return text_ids(tok, "Done.")
        if next(episodes) % 2:
            return text_ids(tok, "Done.")  # claims it, stored nothing: the store says 0
        word = re.findall(r"'([a-z]+)'", text.rsplit("<|im_start|>user", 1)[1])[0]
        call = {"name": "set", "arguments": {"key": "word", "value": word}}
        return text_ids(tok, f"<tool_call>{json.dumps(call)}</tool_call>")

    return script


class _ScriptedKVAgent:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "scripted-kv-agent",
            lambda policy, cfg: ScriptedPolicy(policy.tokenizer, _agent(policy.tokenizer)),
        )


@pytest.mark.slow  # ~15 s of CPU; 50 s wall on this shared 2-core machine under load
def test_a_population_trains_on_an_mcp_env_and_stops_its_server(
    tmp_path: Path, no_leftover_children
) -> None:
    data = tmp_path / "words.jsonl"
    data.write_text(
        "".join(json.dumps({"question": f"Store '{w}'.", "answer": w}) + "\n" for w in WORDS)
    )
    reward = tmp_path / "kv_reward.py"
    reward.write_text(REWARD)
    plugins = get_plugins()
    plugins.add(_ScriptedKVAgent(), "test-scripted-kv-agent")
    SERVERS_SEEN.clear()
    try:
        rc = arena_run.main(
            [
                "+algo=grpo",
                "+env=mcp",
                f"env.command={sys.executable} -m {SERVER}",
                "env.episode_state=tagged",
                f"env.path={data}",
                f"env.reward={reward}",
                "model.name_or_path=arena:tiny-init",
                "model.lora.r=0",
                "backend.name=scripted-kv-agent",
                "algo.group_size=2",
                "algo.beta=0.0",
                "train.max_steps=2",
                "train.prompts_per_step=1",
                "train.max_sampling_rounds=1",
                "train.checkpoint_every=0",
                "generation.max_new_tokens=200",
                "sandbox.workers=1",
                "runtime.threads=1",
                "runtime.progress=lines",
                "logger.names=[csv]",
                "evolution.enabled=true",
                "evolution.population_size=2",
                "evolution.evo_steps=1",
                "evolution.eval_prompts=2",
                f"paths.runs={tmp_path / 'runs'}",
            ]
        )
    finally:
        plugins.remove("test-scripted-kv-agent")
    assert rc == 0
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["population"]["selections"] == 1
    rows = [r for r in csv.DictReader((run_dir / "metrics.csv").open()) if r["step"] != "0"]
    by_step: dict[str, set[str]] = {}
    for r in rows:
        by_step.setdefault(r["step"], set()).add(r["member"])
    assert {k: len(v) for k, v in by_step.items()} == {"1": 2, "2": 2}  # both members trained
    for r in rows:
        # one episode of each group stored its word and the sandboxed reward read it from the
        # episode's store (1.0), the other stored nothing (0.0): the sandbox saw the state dirs
        assert float(r["reward/mean"]) == pytest.approx(0.5), r
        assert float(r["reward/failures"]) == 0 and float(r["groups/kept"]) == 1
        assert float(r["tools/calls"]) == 1
    # every member's fitness (step 0 and each selection) is measured on tool episodes too: the
    # stored word of one of its two held-out episodes read back (0.5), not a single-turn guess
    evals = [r for r in csv.DictReader((run_dir / "metrics.csv").open()) if r["eval/reward_mean"]]
    assert len(evals) == 6 and {float(r["eval/reward_mean"]) for r in evals} == {0.5}
    assert summary["evals"][-1]["eval/reward_mean"] == pytest.approx(0.5)
    # one server process served every episode, and it is gone now (task.close())
    assert len(SERVERS_SEEN) == 1, SERVERS_SEEN
    assert not any(
        psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in SERVERS_SEEN
    )

"""`arena-run +algo=grpo +env=awm` on the shipped suite: a 1-step GRPO run on the tiny model that
finishes, scores its episodes with the tasks' verifiers, reports held-out success per scenario
and leaves no process or database behind.

The model's turns come from a scripted agent (the tiny model never writes a tool call): it
replays the task's oracle calls (arena_envs/awm_suite/oracle.jsonl) one per turn and then its final
answer, on every other training episode (the others give up at once) and on every evaluation
episode. Everything else (the scenario servers
over MCP, the episode runner, the sandboxed verifiers, the loop, evaluation) is the real code.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from pathlib import Path

import pytest

from arena_core.cli import run as arena_run
from arena_core.engines.base import Completion, SamplingParams
from arena_core.hookspecs import Register, hookimpl
from arena_core.plugin_loader import get_plugins

pytest.importorskip("fastapi")
pytest.importorskip("sqlalchemy")
pytest.importorskip("mcp")

SUITE = Path(__file__).resolve().parents[2] / "arena_envs" / "awm_suite"
ORACLE = {o["task"]: o for o in map(json.loads, (SUITE / "oracle.jsonl").open())}


def text_ids(tok, text: str) -> list[int]:
    """One scripted model turn: `text`'s ids and EOS."""
    return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


class ScriptedPolicy:
    """A generation backend whose turns are `script(prompt_ids, greedy) -> ids`."""

    name = "scripted"

    def __init__(self, tokenizer, script) -> None:
        self.tokenizer, self.script, self.policy_version = tokenizer, script, 0

    def generate(self, prompts: list[list[int]], params: SamplingParams, **_) -> list[Completion]:
        out = []
        for p in prompts:
            ids = list(self.script(p, params.temperature == 0.0))[: params.max_new_tokens]
            out.append(
                Completion(
                    prompt_ids=list(p),
                    token_ids=ids,
                    logprobs=[-0.5] * len(ids),
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                    finish_reason="stop",
                    versions=[self.policy_version] * len(ids),
                )
            )
        return out

    def update_weights(self, model_or_state: object, version: int) -> None:
        self.policy_version = version

    def close(self) -> None:
        pass


def oracle_agent(tok):
    """Replay the oracle (per turn: the next call, then the final answer): always when
    evaluating (greedy), on every other training episode (the others give up at once)."""
    episodes = iter(range(10**9))

    def script(prompt: list[int], greedy: bool) -> list[int]:
        text = tok.decode(prompt)
        user = text.split("<|im_start|>user\n", 1)[1]
        oracle = ORACLE[user.split("<|im_end|>", 1)[0].strip()]
        done = user.count("<|im_start|>tool")  # tool answers so far: calls made
        if done == 0 and not greedy and next(episodes) % 2:  # every other one gives up
            return text_ids(tok, "I cannot do that.")
        if done < len(oracle["calls"]):
            return text_ids(tok, f"<tool_call>{json.dumps(oracle['calls'][done])}</tool_call>")
        return text_ids(tok, oracle["final_answer"])

    return script


class _OracleAgent:
    @hookimpl
    def register_backends(self, register: Register) -> None:
        register(
            "awm-oracle-agent",
            lambda policy, cfg: ScriptedPolicy(policy.tokenizer, oracle_agent(policy.tokenizer)),
        )


def _ours(root: Path) -> list[str]:
    return sorted(
        p.name for p in root.iterdir() if p.name.startswith(("arena-awm-", "arena-mcp-state-"))
    )


def test_grpo_trains_one_step_on_the_suite(tmp_path: Path, monkeypatch, no_leftover_children):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR: our folders land here
    before = {p: os.stat(p).st_mtime_ns for p in SUITE.iterdir()}
    plugins = get_plugins()
    plugins.add(_OracleAgent(), "test-awm-oracle-agent")
    try:
        rc = arena_run.main(
            [
                "+algo=grpo",
                "+env=awm",
                f"env.path={SUITE}",
                "env.scenarios=[calendar,library,bank,hotel]",
                "env.holdout_scenarios=[bank,hotel]",
                "model=tiny",
                "model.lora.r=0",
                "backend.name=awm-oracle-agent",
                "algo.group_size=2",
                "algo.beta=0.0",
                "train.max_steps=1",
                "train.prompts_per_step=2",
                "train.max_sampling_rounds=1",
                "train.checkpoint_every=0",
                "generation.max_new_tokens=400",
                "eval.num_prompts=8",
                "sandbox.workers=1",
                "runtime.threads=1",
                "runtime.progress=lines",
                "logger.names=[csv]",
                f"paths.runs={tmp_path / 'runs'}",
            ]
        )
    finally:
        plugins.remove("test-awm-oracle-agent")
    assert rc == 0
    (run_dir,) = [p for p in (tmp_path / "runs").iterdir() if p.is_dir()]
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    row = rows[-1]
    # half the episodes replayed the oracle (verifier: complete), half gave up (others)
    assert float(row["reward/mean"]) == pytest.approx(0.5)
    assert float(row["reward/failures"]) == 0 and float(row["tools/calls"]) >= 2
    # evaluation: held-out success per scenario; bank's task 3 is a question, so its verifier
    # read the model's last message (the final answer) from the episode's state
    assert float(row["eval/accuracy/bank"]) == 1.0 and float(row["eval/accuracy/hotel"]) == 1.0
    assert float(row["eval/accuracy"]) == 1.0
    # nothing outlives the run: no state folder, no database; the suite was not written
    assert _ours(scratch) == []
    assert {p: os.stat(p).st_mtime_ns for p in SUITE.iterdir()} == before

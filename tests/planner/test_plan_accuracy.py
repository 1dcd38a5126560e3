"""The CPU plan's price follows the CPU a run can actually get, and a GRPO step's refill rounds are
priced from the flat-group rate the run observes (issue 44, item 4).

Through the real entry points: `arena plan` (its `--json`), as a user asks for a price, with the
CPU pinned (`ARENA_PLAN_CPU_SHARE`) and with real busy-loop processes beside it; and a real run
(the SDK's `arena.train`, as `arena-run` launches it) whose reward is always flat, so its plan
must be re-priced with the refill rounds the collector really takes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

import arena
from arena_core.cli.main import main as arena_main
from arena_core.planner.refill import expected_step

QUICKSTART = ["+experiment=quickstart", "runtime.threads=1"]


@pytest.fixture
def _light_registry():
    """These tests plan and run through the real plugin registry (the env and reward plugins
    of a run), not the planner suite's hardware-only one."""


def _price(capsys, monkeypatch, share: str | None) -> dict:
    monkeypatch.setenv("ARENA_PLAN_PROBE", "1")
    if share is None:
        monkeypatch.delenv("ARENA_PLAN_CPU_SHARE", raising=False)
    else:
        monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", share)
    capsys.readouterr()
    assert arena_main(["plan", *QUICKSTART, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_arena_plan_prices_the_cpu_share_the_run_gets(capsys, monkeypatch):
    idle = _price(capsys, monkeypatch, "1")
    quarter = _price(capsys, monkeypatch, "0.25")
    assert quarter["priced_at_speed"] == {"learn": 0.25, "decode": 0.25, "share": 0.25}
    assert quarter["micro_batch_tokens"] == idle["micro_batch_tokens"]  # slower, not different
    ratio = (
        quarter["predicted"]["step_seconds"]["total"] / idle["predicted"]["step_seconds"]["total"]
    )
    assert ratio == pytest.approx(4.0, rel=0.02)
    note = next(n for n in quarter["notes"] if n.startswith("priced at the CPU this run gets"))
    assert "ARENA_PLAN_CPU_SHARE=0.25" in note
    monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", "2")
    capsys.readouterr()
    assert arena_main(["plan", *QUICKSTART, "--json"]) != 0
    assert "ARENA_PLAN_CPU_SHARE='2'" in capsys.readouterr().err


def test_busy_processes_started_a_moment_ago_raise_the_price(capsys, monkeypatch):
    """The load average lags: a second after the loops start it has barely moved, yet the plan,
    measuring the CPU its threads get, is priced at a fraction of the idle machine's speed."""
    idle = _price(capsys, monkeypatch, "1")
    loops = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    try:
        time.sleep(0.5)
        busy = _price(capsys, monkeypatch, None)
    finally:
        for p in loops:
            p.kill()
            p.wait()
    # 4 spinning processes + 1 torch thread on 2 cores: about 2/5 of a core, less when the
    # shared machine runs more
    assert busy["priced_at_speed"]["learn"] < 0.7
    assert (
        busy["predicted"]["step_seconds"]["total"]
        > 1.4 * idle["predicted"]["step_seconds"]["total"]
    )


def test_refill_rounds_follow_the_collector_rule():
    refill = {
        "groups_per_step": 2,
        "max_rounds": 4,
        "max_flat_rounds": 2,
        "generate_s_by_groups": [1.0, 1.5, 2.0, 2.5],
        "learn_s_by_groups": [0.0, 3.0, 5.0],
    }
    none_flat = expected_step(refill, 0.0, 0.1, serial=True)
    assert none_flat["total"] == pytest.approx(1.5 + 5.0 + 0.1) and none_flat["rounds"] == 1
    # all flat: round 1 asks for 2 groups, round 2 for 4 (rate 0 counts as 0.5), then it stops
    all_flat = expected_step(refill, 1.0, 0.1, serial=True)
    assert all_flat["rounds"] == 2 and all_flat["learn"] == 0.0
    assert all_flat["generate"] == pytest.approx(1.5 + 2.5)
    half = expected_step(refill, 0.5, 0.1, serial=True)
    assert none_flat["generate"] < half["generate"] < all_flat["generate"] + 1.0
    assert 1 < half["rounds"] < 4 and 0 < half["groups_kept"] < 2


def test_a_flat_run_reprices_its_step_with_the_refill_rounds(tmp_path, capsys):
    """Every group flat: the collector samples 2 groups, then 4, then stops (max_flat_rounds=2)
    and learns nothing; the run says so after its first step and plan.json keeps the price."""
    reward = tmp_path / "zero.py"
    reward.write_text("def reward(question, answer, completion):\n    return 0.0\n")
    run = arena.train(
        [
            *QUICKSTART,
            "train.max_steps=2",
            "train.prompts_per_step=2",
            "algo.group_size=4",
            "generation.max_new_tokens=8",
            "eval.num_prompts=2",
            "train.checkpoint_every=0",
            "sandbox.workers=1",
            "logger.names=[csv]",
            "runtime.progress=lines",
            f"reward={reward}",
            f"paths.runs={tmp_path / 'runs'}",
        ],
        check=False,
    )
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("plan re-priced:")]
    assert "100% of the 6 groups sampled in 1 step(s) were flat" in line
    assert "~2.0 generation round(s)" in line
    plan = json.loads((run.path / "plan.json").read_text())
    table = plan["refill"]["generate_s_by_groups"]
    assert plan["repriced"]["flat_rate"] == 1.0 and plan["repriced"]["rounds"] == 2
    assert plan["repriced"]["step_seconds"]["generate"] == pytest.approx(
        table[1] + table[3], abs=2e-3
    )
    assert plan["repriced"]["step_seconds"]["learn"] == 0.0
    assert plan["repriced_first"]["flat_rate"] == 1.0


def test_an_sft_run_prices_its_step_at_the_cpu_it_gets(tmp_path, monkeypatch, capsys):
    """The tutorial's cold start is an SFT run: its plan.json carries a step price too, the
    learn term on its own rows, and it follows the CPU the run gets."""
    data = tmp_path / "sft.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {b}?", "response": f"<answer>{a + b}</answer>"})
            + "\n"
            for a in range(4)
            for b in range(4)
        )
    )
    monkeypatch.setenv("ARENA_PLAN_PROBE", "1")
    prices = {}
    for share in ("1", "0.5"):
        monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", share)
        run = arena.train(
            [
                "+algo=sft",
                "+env=dataset",
                "model=tiny",
                f"env.path={data}",
                "env.eval_size=4",
                "algo.batch_size=4",
                "train.max_steps=1",
                "runtime.threads=1",
                "logger.names=[csv]",
                "runtime.progress=off",
                f"paths.runs={tmp_path / 'runs'}",
                f"run_name=sft{share}",
            ],
            check=False,
        )
        plan = json.loads((run.path / "plan.json").read_text())
        prices[share] = plan["predicted"]["step_seconds"]["total"]
        assert plan["priced_at_speed"]["learn"] == float(share)
    assert prices["1"] > 0
    assert prices["0.5"] == pytest.approx(2 * prices["1"], rel=0.02)
    assert "| step ~" in capsys.readouterr().out  # the plan line says it

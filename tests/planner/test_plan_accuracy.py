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
from arena_core.cli.run import main as run_main
from arena_core.planner.plan_check import plan_check
from arena_core.planner.refill import add_step, expected_step, refill_note, reprice

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


def test_the_speed_is_the_first_steps_then_the_running_one_after_the_warm_up():
    """The speed is the plan's price of the work a step did over its phases' seconds (a phase
    it did not run takes the other's): the first step's alone, then, from the second step on,
    the running speed of the steps after the first, which warms up."""
    plan = {
        "refill": {
            "groups_per_step": 2,
            "max_rounds": 2,
            "max_flat_rounds": 2,
            "generate_s_by_groups": [1.0, 1.5, 2.0, 2.5],
            "learn_s_by_groups": [0.0, 3.0, 5.0],
        },
        "predicted": {"step_seconds": {"generate": 1.5, "learn": 5.0, "sync": 0.0, "total": 6.5}},
        "workload": {"group_size": 4, "prompt_tokens": 10, "completion_tokens": 10},
        "colocate": "shared",
    }
    totals: dict = {}
    # step 1: 2 groups, 1 flat: a second round of 2 groups kept 1; generation took 7 s
    step1 = {
        "groups/sampled": 4,
        "groups/kept": 2,
        "groups/dropped_zero_adv": 1,
        "sampling/rounds": 2,
        "time/generate_s": 7.0,
        "time/learn_s": 2.5,
        "tokens/trained": 160.0,  # 8 rows of the 20 tokens priced: length scale 1
    }
    add_step(totals, step1)
    assert refill_note(plan, totals, 1).startswith("plan re-priced:")
    speed = plan["repriced"]["observed_speed"]
    assert speed["generate"] == pytest.approx((1.5 + 1.5) / 7.0, abs=1e-3)
    assert speed["learn"] == pytest.approx(5.0 / 2.5, abs=1e-3)
    first_total = plan["repriced"]["step_seconds"]["total"]
    # a second step, ten times slower: priced at its speed alone (the first warmed up)
    add_step(totals, {**step1, "time/generate_s": 70.0, "time/learn_s": 25.0})
    line = refill_note(plan, totals, 2, nth=2)
    assert "the first step warms up" in line
    second = plan["repriced"]["observed_speed"]
    assert second["generate"] == pytest.approx(speed["generate"] / 10, abs=1e-3)
    assert second["learn"] == pytest.approx(speed["learn"] / 10, abs=1e-3)
    assert plan["repriced"]["step_seconds"]["total"] == pytest.approx(10 * first_total, rel=0.01)
    assert totals["refill/warm_total_s"] == plan["repriced"]["step_seconds"]["total"]
    # a third step as fast as the first: the running speed of steps 2-3, said no more
    add_step(totals, step1)
    assert refill_note(plan, totals, 3, nth=3) is None
    running = reprice(plan, totals, 3)["observed_speed"]
    assert running["generate"] == pytest.approx(2 * 3.0 / 77.0, abs=1e-3)
    assert running["learn"] == pytest.approx(2 * 5.0 / 27.5, abs=1e-3)
    # a resumed process warms up again: its first step alone prices it
    add_step(totals, step1)
    refill_note(plan, totals, 4, nth=1)
    assert reprice(plan, totals, 4)["observed_speed"] == speed
    # nothing learned in the first step: learning is priced at the generation's speed
    flat: dict = {}
    add_step(
        flat,
        {
            "groups/sampled": 6,
            "groups/kept": 0,
            "groups/dropped_zero_adv": 6,
            "sampling/rounds": 2,
            "time/generate_s": 8.0,
        },
    )
    refill_note(plan, flat, 1)
    assert flat["refill/speed_generate"] == pytest.approx((1.5 + 2.5) / 8.0)
    assert flat["refill/speed_learn"] == flat["refill/speed_generate"]


def test_the_plan_check_of_a_repriced_step_names_a_changed_machine():
    """Re-priced at the speed of the first step, a step still off says why: the machine changed
    after it (or the first step's warm-up), not the calibration."""
    plan = {
        "predicted": {"step_seconds": {"total": 5.0}},
        "repriced": {
            "observed_speed": {"generate": 1.0, "learn": 1.0},
            "step_seconds": {"total": 3.0},
        },
    }
    assert plan_check(plan, [2.9, 3.1]).endswith("(x1.00)")
    off = plan_check(plan, [1.5, 1.6])
    assert "vs 3.00 s predicted (re-priced after step 1" in off
    assert "ran faster than step 1" in off and "--calibrate" not in off


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
    line, warm = [x for x in out.splitlines() if x.startswith("plan re-priced:")]
    assert "100% of the 6 groups sampled in 1 step(s) were flat" in line
    assert "100% of the 12 groups sampled in 2 step(s) were flat" in warm
    assert "the first step warms up" in warm
    assert "~2.0 generation round(s)" in line
    plan = json.loads((run.path / "plan.json").read_text())
    table = plan["refill"]["generate_s_by_groups"]
    assert plan["repriced"]["flat_rate"] == 1.0 and plan["repriced"]["rounds"] == 2
    # the rounds at the speed the generation really ran at against its price
    first_generate = float(_metrics(run.path)[0]["time/generate_s"])
    speed = plan["repriced"]["observed_speed"]
    assert speed["learn"] == speed["generate"]  # nothing learned: the same CPU's speed
    assert plan["repriced"]["step_seconds"]["generate"] == pytest.approx(
        (table[1] + table[3]) / speed["generate"],
        rel=0.01,
        abs=1e-3,  # 3 decimals in plan.json
    )
    assert plan["repriced"]["step_seconds"]["learn"] == 0.0
    # the final re-price runs at the speed of the steps after the first (here the second)
    second_generate = float(_metrics(run.path)[1]["time/generate_s"])
    assert speed["generate"] == pytest.approx((table[1] + table[3]) / second_generate, rel=0.01)
    first = plan["repriced_first"]
    assert first["flat_rate"] == 1.0
    assert first["observed_speed"]["generate"] == pytest.approx(
        (table[1] + table[3]) / first_generate, rel=0.01
    )
    assert first["step_seconds"]["generate"] == pytest.approx(first_generate, rel=0.01, abs=1e-3)
    assert f"x{first['observed_speed']['generate']:.2f} (generate)" in line
    warm_price = plan["repriced_warm"]
    assert warm_price["after_steps"] == 2 and warm_price["observed_speed"] == speed
    assert warm_price["step_seconds"]["generate"] == pytest.approx(
        second_generate, rel=0.01, abs=1e-3
    )


def _metrics(run_dir) -> list[dict]:
    import csv

    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def test_an_sft_run_prices_its_step_at_the_cpu_it_gets(tmp_path, monkeypatch, capsys):
    """The tutorial's cold start is an SFT run: its plan.json carries a step price too, the
    learn term on its own rows, and it follows the CPU the run gets."""
    data = tmp_path / "sft.jsonl"
    _sft_rows(data)
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
                "train.max_steps=2",
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
        # after the first step: re-priced at the speed that step ran at on its own rows
        step_prices = plan["step_prices_s"]
        first_learn = float(_metrics(run.path)[0]["time/learn_s"])
        first = plan["repriced_first"]
        assert first["observed_speed"]["learn"] == pytest.approx(  # plan.json keeps 3 decimals
            step_prices[0] / first_learn, rel=0.01, abs=5e-4
        )
        assert first["step_seconds"]["total"] == pytest.approx(  # both rounded to 3 decimals
            sum(step_prices) / len(step_prices) / first["observed_speed"]["learn"],
            rel=0.01,
            abs=1e-3,
        )
        # and after the second (the first also warms up), at the second step's speed
        second = plan["repriced_warm"]
        second_learn = float(_metrics(run.path)[1]["time/learn_s"])
        assert second["observed_speed"]["learn"] == pytest.approx(
            step_prices[1] / second_learn, rel=0.01, abs=5e-4
        )
    assert prices["1"] > 0
    assert prices["0.5"] == pytest.approx(2 * prices["1"], rel=0.02)
    out = capsys.readouterr().out
    assert "| step ~" in out  # the plan line says it
    assert "plan re-priced: the first step ran at x" in out
    assert "plan re-priced: the second step ran at (the first also warms up) x" in out


def _sft_rows(path) -> None:
    path.write_text(
        "".join(
            json.dumps({"prompt": f"What is {a} + {b}?", "response": f"<answer>{a + b}</answer>"})
            + "\n"
            for a in range(4)
            for b in range(4)
        )
    )


def test_arena_plan_prices_an_sft_config(tmp_path, capsys, monkeypatch):
    """`arena plan` on an SFT config (the tutorial's cold start is one) prints the SFT plan, its
    step priced on the config's own rows at the CPU the run would get, instead of asking for
    the RL keys an SFT config does not have (algo.group_size)."""
    data = tmp_path / "sft.jsonl"
    _sft_rows(data)
    args = [
        "plan",
        "+algo=sft",
        "+env=dataset",
        "model=tiny",
        f"env.path={data}",
        "algo.batch_size=4",
        "train.max_steps=10",
        "runtime.threads=1",
    ]
    monkeypatch.setenv("ARENA_PLAN_PROBE", "1")
    prices = {}
    for share in ("1", "0.25"):
        monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", share)
        capsys.readouterr()
        assert arena_main([*args, "--json"]) == 0
        found = json.loads(capsys.readouterr().out)
        assert found["kind"] == "sft" and found["rows_per_step"] == 4
        assert found["priced_at_speed"]["learn"] == float(share)
        prices[share] = found["predicted"]["step_seconds"]["total"]
    assert prices["1"] > 0
    assert prices["0.25"] == pytest.approx(4 * prices["1"], rel=0.02)
    assert arena_main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("plan: SFT on the CPU, 1 torch thread(s), 4 rows per step")
    assert "forecast: ~" in out and "(10 steps x ~" in out
    assert "algo.group_size" not in out
    # a dry run shows the same plan
    assert run_main([*args[1:], "dry_run=true"]) == 0
    assert "# plan: SFT on the CPU, 1 torch thread(s), 4 rows per step" in capsys.readouterr().out


def test_arena_plan_says_a_dpo_step_is_not_priced(tmp_path, capsys):
    """DPO generates nothing and its step is not priced: `arena plan` says so and points to the
    dry run, instead of asking for RL keys a DPO config does not have."""
    data = tmp_path / "pref.jsonl"
    data.write_text(
        "".join(
            json.dumps({"prompt": f"{a} + 1 =", "chosen": str(a + 1), "rejected": str(a)}) + "\n"
            for a in range(8)
        )
    )
    args = ["plan", "+algo=dpo", "+env=dataset", "model=tiny", f"env.path={data}"]
    assert arena_main([*args, "env.category=preference"]) != 0
    err = capsys.readouterr().err
    assert "algo=dpo: the planner prices RL and SFT steps; a preference step is not priced" in err
    assert "dry_run=true" in err and "algo.group_size" not in err

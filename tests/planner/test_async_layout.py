"""Async plans: colocated trainers and engines cannot overlap, a split's step is the slower side
plus the sync; the planner splits when that is faster; a finished run calibrates the model."""

from __future__ import annotations

import json

from arena_core.cli.main import main
from arena_core.planner import Workload, get_profile, make_plan
from arena_core.planner.calibrate_run import fit_to_run
from arena_core.planner.coefficients import Coefficients, coefficients_for
from arena_core.planner.cost import combine
from arena_core.planner.plan import Plan

from .conftest import spec

WORK = dict(prompts_per_step=64, group_size=8, prompt_tokens=512, completion_tokens=2048)


def test_colocated_steps_add_up_and_split_steps_overlap() -> None:
    split = Plan(trainer_devices=4, engines=4, engine_tp=1, micro_batch_tokens=4096)
    shared = split.with_(colocate="shared")
    assert combine(split, 10.0, 6.0, 1.0, overlap=True) == 11.0  # max(generate, learn) + sync
    assert combine(split, 10.0, 6.0, 1.0, overlap=False) == 17.0  # the sync runtime waits
    assert combine(shared, 10.0, 6.0, 1.0, overlap=True) == 17.0  # one set of devices: in turn


def test_async_plans_split_the_devices_when_that_is_faster() -> None:
    model, hw = spec("qwen2.5-7b"), get_profile("h100-80")
    async_ = make_plan(model, hw, 8, Workload(**WORK, overlap=True))
    assert async_.plan.colocate == "none"  # trainers and engines on their own GPUs
    p = async_.prediction
    assert p.total_s == max(p.generate_s, p.learn_s) + p.sync_s
    pinned = make_plan(
        model, hw, 8, Workload(**WORK, overlap=True), pinned={"colocate": "any-colocation"}
    )
    q = pinned.prediction
    assert q.total_s == q.generate_s + q.learn_s + q.sync_s
    assert p.total_s < q.total_s
    sync = make_plan(model, hw, 8, Workload(**WORK, overlap=False))
    assert sync.plan.colocate != "none"  # no overlap to gain: every GPU on each phase


def test_a_run_directory_calibrates_the_cost_model(tmp_path, capsys) -> None:
    base = coefficients_for(get_profile("h100-80"))
    predicted = {"generate": 10.0, "learn": 4.0, "sync": 0.5, "total": 10.5}
    measured = {"generate": 20.0, "learn": 2.0, "sync": 1.0, "total": 21.0, "steps": 5}
    coef, ratios, _ = fit_to_run(base, predicted, measured)
    assert ratios["generate_ratio"] == 2.0 and ratios["learn_ratio"] == 0.5
    assert coef.decode_step_overhead_s == 2 * base.decode_step_overhead_s
    assert coef.learn_efficiency == min(1.0, 2 * base.learn_efficiency)
    assert coef.sync_fixed_s == base.sync_fixed_s + 0.5

    run = tmp_path / "run"
    run.mkdir()
    plan = {
        "hardware": {"name": "h100-80", "count": 8},
        "predicted": {"step_seconds": predicted},
        "measured": {"step_seconds": measured},
    }
    (run / "plan.json").write_text(json.dumps(plan))
    assert main(["plan", "--calibrate", str(run), "--json"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["profile"] == "h100-80" and out["fit"]["learn_ratio"] == 0.5
    stored = coefficients_for(get_profile("h100-80"))  # later plans on the profile use it
    assert stored.decode_step_overhead_s == coef.decode_step_overhead_s
    assert isinstance(stored, Coefficients) and stored.source.endswith("h100-80.json")
    # a run named as every other command names it: its run_name under paths.runs
    runs = tmp_path / "runs"
    named = runs / "gpu-20260101-120000"
    named.mkdir(parents=True)
    (named / "config.yaml").write_text("run_name: gpu\n")
    (named / "plan.json").write_text(json.dumps(plan))
    assert main(["plan", "--calibrate", "gpu", f"paths.runs={runs}", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["profile"] == "h100-80"
    assert main(["plan", "--calibrate", "nope", f"paths.runs={runs}"]) == 1
    assert "no run 'nope'" in capsys.readouterr().err

"""The plan a run prints is the run's own: prompt length measured on the env, the shipped CPU
calibration, and a check of the prediction against the first steps' measured time."""

from __future__ import annotations

import itertools
import json
import statistics

from arena_core.cli.plan_summary import PROMPT_SAMPLE, run_plan
from arena_core.config import compose_config
from arena_core.llm_rl.recipe import run_training
from arena_core.models import load_policy
from arena_core.planner.plan_check import plan_check
from arena_core.run_parts.build import build_task
from arena_core.run_parts.prompts import PromptEncoder


def test_quickstart_plan_measures_prompts_as_the_runtime_encodes_them(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path / "cache"))  # no calibration of ours
    cfg = compose_config(["+experiment=quickstart"])
    result = run_plan(cfg)
    policy = load_policy(cfg["model"])
    task = build_task(cfg["env"])
    encode = PromptEncoder(task, policy.tokenizer)
    lengths = [len(encode(ex)) for ex in itertools.islice(task.train_examples(0), PROMPT_SAMPLE)]
    assert result.workload.prompt_tokens == round(statistics.fmean(lengths))
    assert any("prompt length" in note for note in result.notes)
    assert result.calibration == "shipped"
    line = result.summary_line()
    assert "shipped CPU calibration" in line and "uncalibrated" not in line


def test_a_run_checks_the_plan_against_its_first_steps(
    tmp_path, digits_env, run_config, capsys, one_torch_thread
) -> None:
    plan = {"predicted": {"step_seconds": {"total": 1e-3}}}  # far too optimistic on purpose
    run_dir = run_training(run_config(tmp_path, max_steps=4, checkpoint_every=0), plan=plan)
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.startswith("plan check:")]
    summary = json.loads((run_dir / "summary.json").read_text())
    measured = summary["step_seconds_measured"]
    assert "vs 0.00 s predicted" in line and "steps 2-4" in line
    assert "off by more than 30%" in line
    assert "arena plan --calibrate" in line or "other work is slowing this run" in line
    assert summary["step_seconds_predicted"] == 1e-3 and measured > 0
    saved = json.loads((run_dir / "plan.json").read_text())
    assert saved["predicted"] == plan["predicted"] and saved["device"]["device"] == "cpu"


def test_the_plan_check_blames_a_busy_machine_not_the_calibration(monkeypatch) -> None:
    plan = {"predicted": {"step_seconds": {"total": 1.0}}}
    monkeypatch.setattr("os.getloadavg", lambda: (0.0, 0.0, 0.0))
    assert plan_check(plan, [1.1, 1.2]).endswith("(x0.87)")  # within 30%: no advice
    idle = plan_check(plan, [3.0, 3.0])
    assert "arena plan --calibrate runtime.threads=N" in idle
    monkeypatch.setattr("os.getloadavg", lambda: (64.0, 64.0, 64.0))
    busy = plan_check(plan, [3.0, 3.0])
    assert "load average 64.0" in busy and "--calibrate" not in busy

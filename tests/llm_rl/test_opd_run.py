"""On-policy distillation through the real runtime: `arena-run +experiment=quickstart algo=opd`
with a model teacher and a LoRA student, then a full student taught by that run's LoRA
checkpoint; and flat-reward groups kept for the teacher's signal."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from arena_core.cli.main import main
from arena_core.cli.run import execute
from arena_core.cli.run import main as arena_run
from arena_core.llm_rl.recipe import run_training
from arena_core.store import rundir


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with open(run_dir / "metrics.csv") as fh:
        return list(csv.DictReader(fh))


def _quick_opd(runs: Path, *extra: str) -> Path:
    before = set(runs.iterdir()) if runs.exists() else set()
    overrides = [
        "+experiment=quickstart",
        "algo=opd",
        "train.max_steps=2",
        "train.prompts_per_step=2",
        "algo.group_size=4",
        "generation.max_new_tokens=16",
        "eval.num_prompts=4",
        f"paths.runs={runs}",
        "logger.names=[csv]",
        "runtime.progress=off",
        *extra,
    ]
    assert execute(overrides) == 0
    (run_dir,) = set(runs.iterdir()) - before
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "finished"
    return run_dir


@pytest.mark.slow
def test_opd_quickstart_lora_student_then_a_runs_lora_checkpoint_as_teacher(
    tmp_runs: Path, capsys
) -> None:
    # 1. a LoRA student of arena:tiny taught by another model of the same tokenizer
    lora = _quick_opd(tmp_runs, "algo.teacher=arena:tiny-init", "model.lora.r=4", "run_name=lo")
    rows = _rows(lora)
    assert len(rows) == 2 and all(float(r["opd/reverse_kl"]) > 0.1 for r in rows)
    assert (lora / "checkpoints/step_000002/adapter").is_dir()
    # 2. a full student (the untrained init) taught by that run's LoRA checkpoint (merged into
    # its base), with the task reward composed in
    full = _quick_opd(
        tmp_runs,
        "algo.teacher=lo:latest",
        "algo.reward_coef=0.5",
        "model.name_or_path=arena:tiny-init",
        "train.max_steps=1",
    )
    out = capsys.readouterr().out
    assert f"teacher: {lora / 'checkpoints/step_000002'} (step 2, lora)" in out
    assert float(_rows(full)[0]["opd/reverse_kl"]) > 0.1
    assert (full / "checkpoints/step_000001/model").is_dir()
    # 3. the teacher trains on (keeping one checkpoint): `lo:latest` moves to step 3, yet the
    # student's resume is taught by the step 2 it started with, which the pruning kept
    runs = f"paths.runs={tmp_runs}"
    extend = [f"train.resume={lora}", "train.max_steps=3", "train.keep_checkpoints=1", runs]
    assert arena_run(extend) == 0
    assert (lora / "checkpoints/step_000003").is_dir()
    assert (lora / "checkpoints/step_000002/adapter").is_dir()
    capsys.readouterr()
    assert arena_run([f"train.resume={full}", "train.max_steps=2", runs]) == 0
    out = capsys.readouterr().out
    assert f"algo.teacher=lo:latest now names step 3 of {lora.name}" in out
    assert f"teacher: {lora / 'checkpoints/step_000002'} (step 2, lora)" in out
    assert len(_rows(full)) == 2
    # ... and when that checkpoint is gone, the resume says so rather than take another teacher
    shutil.rmtree(lora / "checkpoints/step_000002")
    assert arena_run([f"train.resume={full}", "train.max_steps=3", runs]) == 1
    err = capsys.readouterr().err
    assert f"the checkpoint this run started with, {lora.resolve()}:2, cannot be loaded" in err
    assert len(_rows(full)) == 2 and rundir.run_holder(full) is None  # untouched, not locked
    # 4. the teacher cannot be deleted from under its student (which loads it again to resume)
    delete = ["runs", "delete", "--runs", str(tmp_runs), "--yes"]
    assert main([*delete, "lo"]) == 1
    err = capsys.readouterr().err
    assert "on-policy distillation teacher (algo.teacher)" in err and full.name in err
    assert (lora / "checkpoints/step_000003/adapter").is_dir()
    assert main([*delete, full.name]) == 0 and main([*delete, "lo"]) == 0
    assert not lora.exists()


def test_opd_keeps_flat_reward_groups(tmp_path: Path, digits_env, run_config) -> None:
    """The untrained model never repeats the digit: every reward is 0. GRPO has nothing to learn
    from (every group dropped); OPD trains on every group, graded by the teacher."""
    opd = {"name": "opd", "teacher": "arena:tiny", "group_size": 4, "lr": 1e-3}
    rows = _rows(run_training(run_config(tmp_path, algo=opd, max_steps=1)))
    assert rows[0]["reward/std"] == "0"  # flat rewards
    assert rows[0]["groups/kept"] == "2" and rows[0]["groups/dropped_zero_adv"] == "0"
    assert float(rows[0]["opd/reverse_kl"]) > 0.1 and float(rows[0]["tokens/trained"]) > 0
    grpo = {"name": "grpo", "group_size": 4, "lr": 1e-3, "beta": 0.0}
    rows = _rows(run_training(run_config(tmp_path / "grpo", algo=grpo, max_steps=1)))
    assert rows[0]["groups/kept"] == "0" and int(rows[0]["groups/dropped_zero_adv"]) >= 2

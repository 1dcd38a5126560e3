"""Ctrl-C during an SFT run's first evaluation (before any step): the run still ends as an
interrupted run (exit 130, a summary with no evaluation, a step-0 checkpoint) and resumes from
that checkpoint to a finished run that evaluates first, as a fresh one would."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from arena_core.cli.run import execute
from arena_core.session import RunInterrupted
from arena_core.sft_dpo.eval import Evaluator
from arena_core.store.checkpoints import read_index


def _overrides(sft_file: Path, common: list[str], *extra: str) -> list[str]:
    return [
        "+algo=sft",
        "+env=dataset",
        f"env.path={sft_file}",
        "env.column_mapping={prompt: instruction, response: output}",
        "env.eval_size=4",
        "algo.batch_size=4",
        "train.max_steps=2",
        "eval.every=1",
        *common,
        *extra,
    ]


def test_ctrl_c_before_the_first_evaluation_ends_interrupted_and_resumes(
    sft_file: Path, tmp_runs: Path, common: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = Evaluator.evaluate
    calls: list[int] = []

    def evaluate(self: Evaluator) -> dict:
        calls.append(1)
        if len(calls) == 1:  # the run's initial evaluation, before step 1
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(Evaluator, "evaluate", evaluate)
    with pytest.raises(RunInterrupted) as info:
        execute(_overrides(sft_file, common))
    assert info.value.exit_code == 130
    (run_dir,) = tmp_runs.iterdir()
    assert f"train.resume={run_dir}" in str(info.value)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["interrupted"]) == ("interrupted", 0, True)
    assert summary["evals"] == [] and summary["eval_final_step"] is None
    assert summary["kind"] == "sft" and summary["signal"] == "SIGINT"
    assert read_index(run_dir)["latest"] == "step_000000"
    assert summary["final_checkpoint"].endswith("step_000000")

    assert execute(_overrides(sft_file, common, f"train.resume={run_dir}")) == 0
    assert list(tmp_runs.iterdir()) == [run_dir]  # the same run, not a new one
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["status"], summary["steps"], summary["interrupted"]) == ("finished", 2, False)
    assert [e["step"] for e in summary["evals"]] == [0, 1, 2]  # the initial one made up
    assert summary["eval_loss_initial"] > 0 and summary["eval_final_step"] == 2
    with (run_dir / "metrics.csv").open() as fh:
        assert [int(r["step"]) for r in csv.DictReader(fh)] == [1, 2]

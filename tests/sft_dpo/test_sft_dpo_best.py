"""SFT and DPO runs through `arena-run` have a best checkpoint by their own score (held-out loss,
lower; preference accuracy), found by run name, and chain by `model.init_from=NAME:best`."""

from __future__ import annotations

import json
from pathlib import Path

from arena_core.cli.main import main as arena
from arena_core.cli.run import main as arena_run
from arena_core.store import index


def _only_run(runs: Path, name: str) -> Path:
    (run,) = [p for p in runs.iterdir() if p.name.startswith(f"{name}-")]
    return run


def test_sft_and_dpo_runs_have_a_best_checkpoint_and_chain_by_name(
    sft_file: Path, pref_file: Path, tmp_runs: Path, common: list[str], capsys
) -> None:
    """SFT ranks by held-out loss (lower), DPO by preference accuracy; both by run name."""
    sft_argv = ["+algo=sft", "+env=dataset", f"env.path={sft_file}", "env.eval_size=4"]
    sft_argv += ["env.column_mapping={prompt: instruction, response: output}", "env.category=sft"]
    sft_argv += ["algo.lr=1e-3", "algo.batch_size=4", "eval.every=1", "train.checkpoint_every=0"]
    sft_argv += [*common, "model.name_or_path=arena:tiny-init"]
    assert arena_run([*sft_argv, "train.max_steps=3", "run_name=sft"]) == 0
    sft = _only_run(tmp_runs, "sft")
    evals = json.loads((sft / "summary.json").read_text())["evals"]
    trained = [e for e in evals if e["step"] > 0]
    lowest = min(trained, key=lambda e: e["eval/loss"])
    capsys.readouterr()
    assert arena(["checkpoints", "best", "sft", "--runs", str(tmp_runs)]) == 0
    line = f"step {lowest['step']}  eval/loss={lowest['eval/loss']:.4f}  (lower is better)"
    assert capsys.readouterr().out.startswith(line)
    assert index.read_run(sft).best_step == lowest["step"]

    dpo_argv = ["+algo=dpo", "+env=dataset", f"env.path={pref_file}", "env.eval_size=4"]
    dpo_argv += ["env.category=preference", "model.lora.r=4", "algo.lr=1e-3", "eval.every=1"]
    dpo_argv += ["train.max_steps=2", "train.checkpoint_every=0", *common]
    assert arena_run([*dpo_argv, "model.init_from=sft:best", "run_name=dpo"]) == 0
    out = capsys.readouterr().out
    assert f"model: initialised from {sft}/checkpoints/step_{lowest['step']:06d}" in out
    dpo = _only_run(tmp_runs, "dpo")
    summary = json.loads((dpo / "summary.json").read_text())
    assert summary["best_checkpoint"]["metric"] == "eval/pref_accuracy"
    assert arena(["checkpoints", "best", "dpo", "--runs", str(tmp_runs)]) == 0
    step = summary["best_checkpoint"]["step"]
    assert capsys.readouterr().out.startswith(f"step {step}  eval/pref_accuracy=")

    # and on: one more SFT step from the DPO run's best, named by its run_name
    next_argv = [*sft_argv, "train.max_steps=1", "model.init_from=dpo:best"]
    assert arena_run([*next_argv, "run_name=after-dpo"]) == 0
    assert f"model: initialised from {dpo}/checkpoints/step_{step:06d}" in capsys.readouterr().out

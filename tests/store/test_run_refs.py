"""A run name works wherever a run is named: `arena runs`, `arena checkpoints`, `arena deploy`'s
references, `model.init_from` and the SDK all go through the run index's one resolver, and a name
that several runs share is refused with the list of them."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

import arena
from arena_core.cli.main import main
from arena_core.errors import ArenaError
from arena_core.serve.models import parse_model_specs
from arena_core.store import index

DAY = 86_400.0


def _run(root: Path, dirname: str, run_name: str | None, *, age_days: float) -> Path:
    """A finished run as the loops write it, started `age_days` ago, checkpoints at 2 and 4."""
    d = root / dirname
    (d / "checkpoints").mkdir(parents=True)
    cfg = {"run_name": run_name, "algo": {"name": "grpo"}, "env": {"name": "arithmetic"}}
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    evals = [{"step": 0, "eval/reward_mean": 0.1}]
    entries = []
    for step, reward in ((2, 0.7), (4, 0.5)):
        (d / "checkpoints" / f"step_{step:06d}" / "model").mkdir(parents=True)
        scores = {"eval/reward_mean": reward}
        entries.append({"step": step, "dir": f"step_{step:06d}", "kind": "full", "scores": scores})
        evals.append({"step": step, **scores})
    (d / "checkpoints" / "index.json").write_text(
        json.dumps({"latest": "step_000004", "checkpoints": entries})
    )
    (d / "summary.json").write_text(json.dumps({"steps": 4, "evals": evals}))
    (d / "metrics.csv").write_text("step,reward/mean\n1,0.2\n2,0.4\n")
    then = time.time() - age_days * DAY
    os.utime(d / "config.yaml", (then, then))
    return d


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    _run(root, "sft-20250101-120000", "sft", age_days=3)  # the same run_name twice
    _run(root, "sft-20250102-120000", "sft", age_days=2)
    _run(root, "dpo-20250103-120000", "dpo", age_days=1)
    _run(root, "grpo-arithmetic-20250104-120000", None, age_days=0.5)  # no run_name: algo-env
    _run(root / "lab", "cart-20250105-120000", "cart", age_days=0.2)  # inside a project folder
    _run(root, "kept-for-the-paper", "final", age_days=0.1)  # renamed by hand: config says
    return root


def test_runs_show_list_and_compare_take_run_names(runs: Path, capsys) -> None:
    assert main(["runs", "show", "dpo", "--runs", str(runs)]) == 0
    assert capsys.readouterr().out.startswith(f"dpo-20250103-120000  ({runs}/dpo-20250103-120000)")
    assert main(["runs", "show", "final", "--runs", str(runs), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["run"]["name"] == "kept-for-the-paper"
    png = runs.parent / "c.png"
    argv = ["runs", "compare", "dpo", "cart", "grpo-arithmetic", "--png", str(png)]
    assert main([*argv, "--runs", str(runs), "--json"]) == 0
    compared = json.loads(capsys.readouterr().out)["runs"]
    assert list(compared) == [
        "dpo-20250103-120000",
        "cart-20250105-120000",
        "grpo-arithmetic-20250104-120000",
    ]
    # the table names each run in full: runs of one preset differ in their last characters
    names = ["sft-20250101-120000", "sft-20250102-120000", "grpo-arithmetic-20250104-120000"]
    assert main(["runs", "compare", *names, "--runs", str(runs), "--png", str(png)]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split() == names
    steps = next(r for r in rows if r.startswith("steps "))
    assert steps.split()[1:] == ["4", "4", "4"]
    assert len(steps) == len(header)  # each value under its run's name
    assert main(["checkpoints", "list", "cart", "--runs", str(runs)]) == 0
    assert "best" in capsys.readouterr().out
    assert main(["checkpoints", "best", "dpo", "--runs", str(runs)]) == 0
    assert capsys.readouterr().out.startswith("step 2  eval/reward_mean=0.7000")
    assert main(["metrics", "cart", "--runs", str(runs), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "step,reward/mean"


def test_run_ids_paths_and_suffixes_resolve_alike(runs: Path) -> None:
    newest = runs / "sft-20250102-120000"
    for ref in ("sft-20250102-120000", str(newest), "lab/cart-20250105-120000"):
        assert index.resolve_run(ref, runs).is_dir()
    assert index.select_checkpoint("sft-20250102-120000:2", runs)[1].step == 2
    assert index.select_checkpoint("cart:best", runs)[1].step == 2
    assert index.select_checkpoint("cart:latest", runs)[1].step == 4
    assert index.select_checkpoint("final", runs)[1].step == 4  # plain RUN: the latest


def test_deploy_references_resolve_run_names(runs: Path) -> None:
    """`arena deploy dpo:best --model b=cart:4` resolves as load_models does: parse the specs,
    then the run index's select_checkpoint for each."""
    specs = parse_model_specs(["dpo:best", "b=cart:4", f"c={runs}/sft-20250101-120000:best"])
    picked = [(name, *index.select_checkpoint(target, runs)) for name, target in specs]
    assert [(n, d.name, c.step) for n, d, c in picked] == [
        ("", "dpo-20250103-120000", 2),
        ("b", "cart-20250105-120000", 4),
        ("c", "sft-20250101-120000", 2),
    ]


def test_an_ambiguous_name_lists_the_runs_and_how_to_pick_one(runs: Path, capsys) -> None:
    with pytest.raises(index.AmbiguousRunError) as info:
        index.select_checkpoint("sft:best", runs)
    message = str(info.value)
    assert "'sft' names 2 runs (newest first)" in message
    newer, older = message.index("sft-20250102-120000"), message.index("sft-20250101-120000")
    assert newer < older  # newest first, each with its directory and start date
    assert str(runs / "sft-20250101-120000") in message
    started = time.strftime("%Y-%m-%d", time.localtime(time.time() - 3 * DAY))
    assert started in message
    assert "e.g. sft-20250102-120000:best for the newest" in message
    for argv in (
        ["runs", "show", "sft"],
        ["checkpoints", "list", "sft"],
        ["checkpoints", "best", "sft"],
        ["runs", "compare", "dpo", "sft"],
        ["deploy", "sft:best"],  # refused while resolving, before any server starts
    ):
        assert main([*argv, "--runs", str(runs)]) == 1, argv
        err = capsys.readouterr().err
        assert "'sft' names 2 runs" in err and "sft-20250101-120000" in err, argv
    with pytest.raises(ArenaError, match="no run 'nope'.*Runs there: .*dpo-20250103-120000"):
        index.resolve_run("nope", runs)


def test_the_sdk_finds_runs_and_checkpoints_by_name(runs: Path) -> None:
    assert arena.run("dpo", runs).path == runs / "dpo-20250103-120000"
    best = arena.checkpoint("cart:best", runs)
    assert (best.step, best.run.path.name) == (2, "cart-20250105-120000")
    assert arena.run("final", runs).best().step == 2
    with pytest.raises(index.AmbiguousRunError, match="'sft' names 2 runs"):
        arena.run("sft", runs)

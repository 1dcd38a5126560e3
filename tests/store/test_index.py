"""The run index reads run directories as they are, damaged ones included, and the CLI over it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml

from arena_core.cli.main import main
from arena_core.errors import ArenaError
from arena_core.store import index


def _run(
    root: Path,
    name: str,
    *,
    steps: int = 4,
    scores: dict[int, dict] | None = None,
    summary: dict | None = None,
    project: str | None = None,
) -> Path:
    """A run directory as the loop writes it (checkpoint dirs hold a placeholder file)."""
    d = root / name
    d.mkdir(parents=True)
    cfg = {"algo": {"name": "grpo"}, "env": {"name": "arithmetic"}, "train": {"max_steps": steps}}
    if project:
        cfg["project"] = project
    (d / "config.yaml").write_text(yaml.safe_dump(cfg))
    entries = []
    for step, sc in (scores or {}).items():
        ck = d / "checkpoints" / f"step_{step:06d}" / "model"
        ck.mkdir(parents=True)
        (ck / "model.safetensors").write_bytes(b"x" * 100)
        entries.append({"step": step, "dir": f"step_{step:06d}", "kind": "full", "scores": sc})
    if entries:
        latest = entries[-1]["dir"]
        (d / "checkpoints" / "index.json").write_text(
            json.dumps({"latest": latest, "checkpoints": entries})
        )
    if summary is not None:
        (d / "summary.json").write_text(json.dumps(summary))
    (d / "metrics.csv").write_text("step,reward/mean,loss\n1,0.5,0.1\n2,0.75,\n")
    return d


SCORES = {
    2: {"eval/reward_mean": 0.5, "eval/accuracy": 0.4},
    4: {"eval/reward_mean": 0.9, "eval/accuracy": 0.3},
}
SUMMARY = {
    "steps": 4,
    "wall_seconds": 12.0,
    "evals": [{"step": 0, "eval/reward_mean": 0.1}, {"step": 4, "eval/reward_mean": 0.9}],
}


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    root = tmp_path / "runs"
    _run(root, "good", scores=SCORES, summary=SUMMARY)
    time.sleep(0.01)
    _run(root, "killed", scores={2: SCORES[2]})  # no summary: killed or still running
    bad = _run(root, "broken", summary=SUMMARY)
    (bad / "config.yaml").write_text("algo: [unclosed\n")
    half = _run(root, "half", scores=SCORES)
    (half / "summary.json").write_text('{"steps": 4, "eval')  # a crash mid-write
    _run(root, "interrupted", summary={**SUMMARY, "interrupted": True})
    _run(root, "failed", summary={**SUMMARY, "status": "failed"})
    _run(root / "proj", "member", summary=SUMMARY, project="proj")
    (root / "notes").mkdir()  # neither a run nor a project with runs
    return root


def test_listing_survives_damaged_runs_and_says_what_is_wrong(runs: Path) -> None:
    by_name = {r.name: r for r in index.list_runs(runs)}
    assert set(by_name) == {"good", "killed", "broken", "half", "interrupted", "failed", "member"}
    assert by_name["good"].status == "finished" and by_name["good"].best_eval_reward == 0.9
    assert by_name["good"].algorithm == "grpo" and by_name["good"].steps == 4
    assert by_name["killed"].status == "incomplete" and by_name["killed"].steps == 2
    assert by_name["broken"].status == "corrupt" and "config.yaml" in by_name["broken"].problem
    assert by_name["half"].status == "corrupt" and "summary.json" in by_name["half"].problem
    assert by_name["interrupted"].status == "interrupted"
    assert by_name["failed"].status == "failed"  # summary.json's own status wins
    assert by_name["member"].project == "proj"
    assert [r.name for r in index.list_runs(runs, project="proj")] == ["member"]


def test_checkpoints_best_by_metric_and_references(runs: Path) -> None:
    ckpts = index.list_checkpoints(runs / "good")
    assert [(c.step, c.best, c.latest) for c in ckpts] == [(2, False, False), (4, True, True)]
    assert ckpts[0].size_bytes >= 100
    assert index.best_checkpoint(runs / "good", metric="eval/accuracy").step == 2
    assert index.select_checkpoint("good:2", runs)[1].step == 2
    assert index.select_checkpoint("good:best", runs)[1].step == 4
    assert index.resolve_run("member", runs) == runs / "proj" / "member"
    with pytest.raises(ArenaError, match="no checkpoint at step 3; steps: 2, 4"):
        index.select_checkpoint("good:3", runs)
    with pytest.raises(ArenaError, match="eval/reward_mean, eval/accuracy|eval/accuracy, eval"):
        index.best_checkpoint(runs / "good", metric="eval/nope")
    with pytest.raises(ArenaError, match="Runs there: .*good"):
        index.resolve_run("nope", runs)
    # a selector that is not one names the run it found and what may follow the ':'
    for typo in ("good:bset", "good:-1", f"{runs / 'good'}:lastest"):
        with pytest.raises(ArenaError, match="has no checkpoint '.*': after the ':' comes a step"):
            index.select_checkpoint(typo, runs)
    with pytest.raises(ArenaError, match="no run 'nope:bset'"):
        index.select_checkpoint("nope:bset", runs)


def test_cli_lists_shows_and_deletes(runs: Path, capsys) -> None:
    assert main(["runs", "list", "--runs", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "corrupt" in out and "broken" in out and "finished" in out
    assert main(["runs", "list", "--runs", str(runs), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["name"]: r["status"] for r in rows}["half"] == "corrupt"
    assert (
        main(["checkpoints", "best", "good", "--runs", str(runs), "--metric", "eval/accuracy"]) == 0
    )
    assert capsys.readouterr().out.startswith("step 2  eval/accuracy=0.4000")
    assert main(["checkpoints", "list", "good", "--runs", str(runs)]) == 0
    assert "best latest" in capsys.readouterr().out
    # a metric no checkpoint has is a typo to name, not a listing without a "best" mark
    assert main(["checkpoints", "list", "good", "--runs", str(runs), "--metric", "eval/acc"]) == 1
    assert "has a held-out score 'eval/acc'. Scored metrics:" in capsys.readouterr().err
    assert main(["metrics", "good", "--runs", str(runs), "--csv"]) == 0
    assert capsys.readouterr().out.splitlines() == ["step,reward/mean,loss", "1,0.5,0.1", "2,0.75,"]
    assert main(["metrics", "good", "--runs", str(runs), "--json", "--keys", "loss"]) == 0
    assert json.loads(capsys.readouterr().out) == {"step": [1.0, 2.0], "loss": [0.1, None]}
    assert main(["metrics", "good", "--runs", str(runs), "--keys", "nope"]) == 1
    assert "no column 'nope'" in capsys.readouterr().err
    assert (
        main(
            ["runs", "compare", "good", "failed", "--runs", str(runs), "--png", str(runs / "c.png")]
        )
        == 0
    )
    assert (runs / "c.png").stat().st_size > 1000
    for png, why in ((runs / "c.png" / "d.png", "is a file, not a folder"), (runs, "is a folder")):
        compare = ["runs", "compare", "good", "failed", "--runs", str(runs), "--png", str(png)]
        assert main(compare) != 0
        err = " ".join(capsys.readouterr().err.split())
        assert f"cannot write the curves to {png}: " in err and why in err
    # a --png typo that names a config or a dataset is refused, never overwritten with an image
    config = runs / "good" / "config.yaml"
    kept = config.read_text()
    compare = ["runs", "compare", "good", "--runs", str(runs), "--png", str(config)]
    assert main(compare) != 0
    assert "the file's name ends in .png" in capsys.readouterr().err
    assert config.read_text() == kept
    assert main(["runs", "delete", "killed", "--runs", str(runs)]) == 1  # not a tty: asks for --yes
    assert (runs / "killed").is_dir()
    assert main(["runs", "delete", "killed", "--runs", str(runs), "--yes"]) == 0
    assert "killed" not in [r.name for r in index.list_runs(runs)]
    # a project's last run: its folder goes with it; a folder that is not a project stays
    assert main(["runs", "delete", "member", "--runs", str(runs), "--yes"]) == 0
    assert not (runs / "proj").exists() and (runs / "notes").is_dir()


def test_metrics_json_stays_json_when_a_value_overflowed(runs: Path, capsys) -> None:
    """A NaN loss or an overflowed ratio in metrics.csv is printed as null: `--json` output
    must parse as strict JSON (no `NaN`/`Infinity` tokens) for the tools that read it."""
    run = runs / "good"
    (run / "metrics.csv").write_text("step,loss,mismatch/max_ratio\n1,nan,inf\n2,0.25,-inf\n")
    assert main(["metrics", "good", "--runs", str(runs), "--json"]) == 0

    def no_constants(token: str) -> None:
        raise AssertionError(f"non-JSON token {token} in the output")

    out = json.loads(capsys.readouterr().out, parse_constant=no_constants)
    assert out == {"step": [1.0, 2.0], "loss": [None, 0.25], "mismatch/max_ratio": [None, None]}


def test_metrics_keys_that_are_not_columns_suggest_the_ones_meant(runs: Path, capsys) -> None:
    """`--keys reward` names the reward/... columns; a misspelling gets the closest column."""
    assert main(["metrics", "good", "--runs", str(runs), "--keys", "reward", "los"]) == 1
    err = capsys.readouterr().err
    assert "no column 'reward' (did you mean reward/mean?); 'los' (did you mean loss?)" in err


def test_classic_rl_runs_rank_by_held_out_return(tmp_path: Path) -> None:
    nan = float("nan")  # an evaluation that could not score never ranks
    returns = {
        10: {"eval/return_mean": 200.0},
        20: {"eval/return_mean": 150.0},
        30: {"eval/return_mean": nan},
    }
    summary = {"steps": 20, "evals": [{"step": 10, "eval/return_mean": 200.0}]}
    run = _run(tmp_path, "ppo", steps=20, scores=returns, summary=summary)
    assert index.best_checkpoint(run).step == 10  # no eval/reward_mean: the return ranks
    assert index.score_of(index.best_checkpoint(run)) == ("eval/return_mean", 200.0)
    assert index.read_run(run).best_eval_reward == 200.0
    # the run's summary (store.index.best_checkpoint_entry) names the same one as deploy RUN:best
    assert index.best_checkpoint_entry(run)["step"] == 10


def test_runs_naming_a_file_or_no_folder_says_so(tmp_path: Path, capsys) -> None:
    """`--runs results.csv` was read as a folder holding no runs (the dashboard served an empty
    page); a folder that does not exist is named as such."""
    results = tmp_path / "results.csv"
    results.write_text("step,loss\n")
    for argv in (["runs", "list"], ["dashboard"], ["checkpoints", "list", "x"]):
        with pytest.raises(SystemExit):
            main([*argv, "--runs", str(results)])
        assert f"{results} is a file; --runs is the folder runs are written to" in (
            capsys.readouterr().err
        )
    assert main(["runs", "list", "--runs", str(tmp_path / "nope")]) == 0
    assert "(no such folder: --runs DIR names where they are)" in capsys.readouterr().out


def test_reading_runs_from_the_cli_does_not_load_torch(runs: Path) -> None:
    """`arena --help`, `arena runs list` and `arena checkpoints list` read YAML and JSON only;
    importing torch would add seconds to every one of them."""
    import subprocess
    import sys

    probe = (
        "import contextlib, io, sys\n"
        "from arena_core.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        main(['--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"    assert main(['runs', 'list', '--runs', {str(runs)!r}]) == 0\n"
        f"    assert main(['checkpoints', 'list', 'good', '--runs', {str(runs)!r}]) == 0\n"
        "print(out.getvalue())\n"
        "print('torch loaded:', 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "best latest" in done.stdout  # the checkpoints were listed
    assert "torch loaded: False" in done.stdout

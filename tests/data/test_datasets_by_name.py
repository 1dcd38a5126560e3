"""Datasets by name: `arena datasets add NAME SOURCE [--category ...] [--map ...]` validates once and
records the dataset in Arena's home; `list`, `show`, `rm`; a run then says `env.dataset=NAME`
(env=dataset and env=gsm8k) instead of the path, category and column mapping. Through the
`arena` and `arena-run` entry points, with the registry in a temporary $ARENA_CACHE_DIR."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.cli.main import main as arena
from arena_core.cli.run import main as arena_run


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ARENA_CACHE_DIR", str(tmp_path / "home"))
    return tmp_path / "home"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_add_list_show_rm_and_a_run_by_name(
    home: Path, tmp_path: Path, tmp_runs: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [{"instruction": f"{i} + 1 =", "output": str(i + 1)} for i in range(12)]
    data = _write(tmp_path / "demos.jsonl", rows)
    monkeypatch.chdir(tmp_path)  # a relative source is recorded as an absolute path
    args = ["datasets", "add", "demos", "demos.jsonl", "--category", "sft"]
    assert arena([*args, "--map", "prompt=instruction,response=output"]) == 0
    out = capsys.readouterr().out
    assert "registered demos: sft data, 12 rows" in out and "env.dataset=demos" in out
    registry = json.loads((home / "datasets.json").read_text())["datasets"]
    assert registry["demos"]["source"] == str(data)
    assert registry["demos"]["column_mapping"] == {"prompt": "instruction", "response": "output"}

    assert arena(["datasets", "list"]) == 0
    assert "demos" in capsys.readouterr().out
    assert arena(["datasets", "show", "demos", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 12

    # a run by name: the path, category and mapping come from the registry
    run = ["+algo=sft", "+env=dataset", "env.dataset=demos", "model=tiny", "env.eval_size=4"]
    assert arena_run([*run, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    assert f"path: {data}" in out and "category: sft" in out and "instruction" in out
    assert "# pre-flight: PASS" in out

    # the same name twice is refused; a wrong mapping is refused before anything is recorded
    assert arena(args) == 1
    assert "already registered as 'demos'" in capsys.readouterr().err
    bad = ["datasets", "add", "other", str(data), "--category", "sft"]
    assert arena([*bad, "--map", "prompt=nope"]) == 1
    assert "no column 'nope'" in capsys.readouterr().err
    assert arena([*bad, "--map", "prompt"]) == 1
    assert "--map 'prompt': write CANONICAL=COLUMN pairs" in capsys.readouterr().err
    assert arena([*bad, "--map", "prompt=instruction,prompt=output"]) == 1
    assert "maps 'prompt' twice ('instruction' and 'output')" in capsys.readouterr().err
    # a split or hub subset of one local file would be recorded but never picked: refused
    mapped = [*bad, "--map", "prompt=instruction,response=output"]
    assert arena([*mapped, "--split", "test"]) == 1
    assert "--split test: " in capsys.readouterr().err
    assert arena([*mapped, "--config", "main"]) == 1
    assert "--config main: names a subset of a hub dataset" in capsys.readouterr().err
    assert "other" not in json.loads((home / "datasets.json").read_text())["datasets"]
    # the JSON form `arena validate --column-mapping` takes is read here too
    as_json = json.dumps({"prompt": "instruction", "response": "output"})
    assert arena([*bad, "--map", as_json]) == 0
    capsys.readouterr()
    registry = json.loads((home / "datasets.json").read_text())["datasets"]
    assert registry["other"]["column_mapping"] == {"prompt": "instruction", "response": "output"}

    # the file moved after it was registered: the name says so, not a missing env.path
    moved = data.rename(tmp_path / "moved.jsonl")
    assert arena_run([*run, "dry_run=true", f"paths.runs={tmp_runs}"]) == 2
    err = capsys.readouterr().err
    assert f"the dataset registered as 'demos' is {data}, which no longer exists" in err
    assert "arena datasets add demos NEW_PATH --category sft --force" in err
    moved.rename(data)

    assert arena(["datasets", "rm", "demos"]) == 0
    assert data.is_file()  # the data stay
    assert arena_run([*run, "dry_run=true", f"paths.runs={tmp_runs}"]) == 2
    assert "no dataset registered as 'demos'" in capsys.readouterr().err


def test_gsm8k_by_name_and_a_category_that_does_not_fit(
    home: Path, tmp_path: Path, tmp_runs: Path, capsys
) -> None:
    rows = [
        {"problem": f"What is {i} + 1?", "solution": f"{i} + 1 = {i + 1}\n#### {i + 1}"}
        for i in range(20)
    ]
    data = _write(tmp_path / "math.jsonl", rows)
    add = ["datasets", "add", "math", str(data), "--category", "reasoning"]
    assert arena([*add, "--map", "question=problem,answer=solution"]) == 0
    capsys.readouterr()
    run = ["+experiment=quickstart", "env=gsm8k", "env.dataset=math", "env.eval_size=4"]
    assert arena_run([*run, "dry_run=true", f"paths.runs={tmp_runs}"]) == 0
    out = capsys.readouterr().out
    assert f"path: {data}" in out and "question: problem" in out

    prefs = _write(tmp_path / "prefs.jsonl", [{"prompt": "p", "chosen": "a", "rejected": "b"}])
    assert arena(["datasets", "add", "prefs", str(prefs), "--category", "preference"]) == 0
    capsys.readouterr()
    assert arena_run([*run[:2], "env.dataset=prefs", "dry_run=true"]) == 2
    assert "is preference data, but this environment needs reasoning data" in (
        capsys.readouterr().err
    )


def test_the_category_defaults_to_what_the_columns_hold(home: Path, tmp_path: Path, capsys) -> None:
    """Without --category the split's columns (after the mapping) decide, as env.category does
    for a run's file; columns that match nothing are refused naming --category and --map."""
    prefs = _write(tmp_path / "prefs.jsonl", [{"prompt": "2+2", "chosen": "4", "rejected": "5"}])
    folder = tmp_path / "qa"
    folder.mkdir()
    _write(folder / "train.jsonl", [{"question": "2+2", "answer": "4"}])
    odd = _write(tmp_path / "odd.jsonl", [{"problem": "2+2", "solution": "4"}])
    assert arena(["datasets", "add", "prefs", str(prefs)]) == 0
    assert arena(["datasets", "add", "qa", str(folder)]) == 0
    assert arena(["datasets", "add", "odd", str(odd)]) == 1
    err = capsys.readouterr().err
    assert "its columns (problem, solution) match no category" in err and "--category" in err
    mapping = "question=problem,answer=solution"
    assert arena(["datasets", "add", "odd", str(odd), "--column-mapping", mapping]) == 0
    registry = json.loads((home / "datasets.json").read_text())["datasets"]
    assert {n: e["category"] for n, e in registry.items()} == {
        "prefs": "preference",
        "qa": "reasoning",
        "odd": "reasoning",
    }

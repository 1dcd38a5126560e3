"""Arena's own folder ($ARENA_CACHE_DIR, default ~/.cache/arena) where it cannot be written: every
command that keeps something there says so, with the fix, before it spends anything, instead of
a FileExistsError or NotADirectoryError traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.cli.main import main as arena
from arena_core.cli.run import main as arena_run

FIX = "Set ARENA_CACHE_DIR to a folder you can write in (or unset it for ~/.cache/arena)."


@pytest.fixture
def home_is_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cache"
    home.write_text("not a folder\n")
    monkeypatch.setenv("ARENA_CACHE_DIR", str(home))
    return home


def test_each_command_that_keeps_something_in_arenas_folder_says_what_is_wrong(
    home_is_a_file: Path, tmp_path: Path, capsys
) -> None:
    data = tmp_path / "qa.jsonl"
    data.write_text(json.dumps({"question": "1 + 1 =", "answer": "2"}) + "\n")
    why = f"{home_is_a_file} is a file, not a folder"

    assert arena(["datasets", "add", "qa", str(data), "--category", "reasoning"]) != 0
    err = capsys.readouterr().err
    assert f"the dataset registry cannot be kept in Arena's folder {home_is_a_file}" in err
    assert why in err and FIX in err and "Traceback" not in err

    assert arena(["models", "pull", "smollm2-135m-instruct"]) != 0
    err = capsys.readouterr().err
    assert "the model smollm2-135m-instruct cannot be kept" in err and why in err

    assert arena(["plan", "--calibrate", "+experiment=quickstart"]) != 0
    captured = capsys.readouterr()
    assert "the calibration of cpu cannot be kept" in captured.err and why in captured.err
    assert "calibrating:" not in captured.out + captured.err  # refused before measuring

    assert home_is_a_file.read_text() == "not a folder\n"  # and the file is left as it was


def test_a_run_on_a_model_to_fetch_fails_its_preflight_before_a_run_directory_exists(
    home_is_a_file: Path, tmp_runs: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARENA_PREFLIGHT_SAMPLE_PROMPTS", "0")
    overrides = ["+experiment=quickstart", "model=smollm2-135m-instruct", f"paths.runs={tmp_runs}"]
    assert arena_run(overrides) != 0
    out = " ".join(capsys.readouterr().err.split())  # the preflight's table wraps its cells
    assert "FAIL model.available: the model smollm2-135m-instruct cannot be kept" in out
    assert list(tmp_runs.iterdir()) == []

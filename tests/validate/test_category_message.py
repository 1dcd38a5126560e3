"""A dataset's `env.category` is the file's own unless set; GRPO on data of another category,
or read with the wrong `env.category`, says what the file actually holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from arena_core.cli.run import main as arena_run


def _file(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "data.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def _error(capsys: pytest.CaptureFixture[str], path: Path, *extra: str) -> str:
    code = arena_run(["+algo=grpo", "+env=dataset", f"env.path={path}", "model=tiny", *extra,
                      "--dry-run"])  # fmt: skip
    assert code != 0
    return capsys.readouterr().err


def test_question_answer_rows_need_no_category_and_a_wrong_one_is_named(capsys, tmp_path) -> None:
    path = _file(tmp_path, [{"question": f"{i}+1?", "answer": f"{i + 1}"} for i in range(8)])
    # unset, the category is read from the columns: reasoning, what GRPO trains on
    assert arena_run(["+algo=grpo", "+env=dataset", f"env.path={path}", "model=tiny",
                      "--dry-run"]) == 0  # fmt: skip
    assert "category: reasoning" in capsys.readouterr().out
    err = _error(capsys, path, "env.category=sft")  # set, and wrong
    assert (
        "its columns question, answer look like reasoning data. Set env.category=reasoning" in err
    )
    assert "provides env.category=sft" not in err and "+algo=sft" not in err


def test_real_sft_rows_get_the_algorithm_to_use(capsys, tmp_path) -> None:
    path = _file(tmp_path, [{"prompt": "hi", "response": "hello"}] * 4)
    err = _error(capsys, path)
    assert "Use +algo=sft for sft data" in err


def test_preference_rows_are_named_as_such(capsys, tmp_path) -> None:
    path = _file(tmp_path, [{"prompt": "p", "chosen": "a", "rejected": "b"}] * 4)
    err = _error(capsys, path)  # read as what it is: preference data, which DPO trains on
    assert "is read as env.category=preference data" in err and "Use +algo=dpo" in err
    err = _error(capsys, path, "env.category=sft")
    assert "look like preference data: set env.category=preference and use +algo=dpo" in err
    assert arena_run(["+algo=dpo", "+env=dataset", f"env.path={path}", "model=tiny",
                      "--dry-run"]) == 0  # fmt: skip


def test_validate_dataset_checks_a_file_as_the_category_its_columns_have(capsys, tmp_path) -> None:
    """`arena validate dataset FILE` without --category checked every file as reasoning data:
    a valid SFT file FAILed with a suggestion to map prompt to question."""
    from arena_core.cli.main import main as arena

    rows = [{"prompt": f"say {i}", "response": f"{i}"} for i in range(6)]
    path = _file(tmp_path, rows)
    assert arena(["validate", "dataset", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["verdict"] == "PASS"
    assert any(c["detail"] == "6 rows (sft)" for c in report["checks"])
    assert arena(["validate", "dataset", str(path), "--category", "reasoning"]) == 1  # as asked

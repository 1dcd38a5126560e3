"""Dataset checks: columns per category and mapping, types, empties, duplicates."""

from __future__ import annotations

import json

import pytest

from arena_core.validate import validate_dataset


def write(tmp_path, rows, name="d.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return str(path)


def statuses(report):
    return {c.name: c.status for c in report.checks}


def test_clean_dataset_passes(tmp_path):
    path = write(tmp_path, [{"question": f"q{i}", "answer": str(i)} for i in range(10)])
    report = validate_dataset(path)
    assert report.verdict == "PASS", report.summary()
    assert report.info["rows"] == 10


def test_missing_column_names_what_was_found(tmp_path):
    path = write(tmp_path, [{"problem": "q", "answer": "1"}])
    report = validate_dataset(path)
    assert report.verdict == "FAIL"
    detail = report.check("columns").detail
    assert "question" in detail and "problem" in detail and "--column-mapping" in detail


def test_mapping_fixes_columns_and_bad_mapping_is_reported(tmp_path):
    path = write(tmp_path, [{"problem": f"q{i}", "answer": "1"} for i in range(3)])
    assert validate_dataset(path, column_mapping={"question": "problem"}).verdict == "PASS"
    bad = validate_dataset(path, column_mapping={"question": "problme"})
    assert bad.verdict == "FAIL"
    assert "problme" in bad.check("columns").detail


def test_types_empties_duplicates(tmp_path):
    rows = [{"question": "same", "answer": "1"}, {"question": "same", "answer": ""}]
    rows += [{"question": f"q{i}", "answer": {"value": i}} for i in range(3)]
    report = validate_dataset(write(tmp_path, rows))
    got = statuses(report)
    assert got["types"] == "FAIL" and "answer: 3 rows" in report.check("types").detail
    assert got["empties"] == "WARN"
    assert got["duplicates"] == "WARN"


def test_numbers_are_read_as_their_text_as_training_reads_them(tmp_path, capsys):
    """JSONL answers written as numbers (`"answer": 42`) load for training as "42"; the types
    check failed them, so a dataset the run could train on stopped at the pre-flight. A whole
    number stored as a float reads "3.0", which an answer of 3 does not match: a WARN."""
    from arena_core.cli.main import main as arena

    ints = write(tmp_path, [{"question": f"{i}+1?", "answer": i + 1} for i in range(5)])
    report = validate_dataset(ints)
    assert report.verdict == "PASS", report.summary()
    assert "answer: 5 numbers, read as their text" in report.check("types").detail
    assert arena(["validate", "dataset", ints]) == 0
    assert "PASS" in capsys.readouterr().out
    floats = [{"question": f"q{i}", "answer": v} for i, v in enumerate([2.5, 3.0])]
    check = validate_dataset(write(tmp_path, floats, "f.jsonl")).check("types")
    assert check.status == "WARN" and "(first row 1: 3.0 -> '3.0')" in check.detail
    flags = [{"question": "q", "answer": True}]
    assert validate_dataset(write(tmp_path, flags, "b.jsonl")).check("types").status == "FAIL"


def test_csv_and_other_categories(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt,chosen,rejected\nhi,a,b\nho,c,d\n")
    assert validate_dataset(str(path), category="preference").verdict == "PASS"
    assert validate_dataset(str(path), category="reasoning").verdict == "FAIL"


def test_pairs_whose_chosen_is_the_rejected_answer_teach_dpo_nothing(tmp_path, capsys):
    """Some such pairs: a warning naming the first; all of them (chosen and rejected mapped to
    the same column, say): a FAIL, and `+algo=dpo` stops before a run directory exists."""
    from arena_core.cli.run import main as arena_run

    rows = [{"prompt": f"{i}+1=", "chosen": str(i + 1), "rejected": "x"} for i in range(8)]
    rows[2]["rejected"] = " 3 "  # the same text but for the whitespace around it
    report = validate_dataset(write(tmp_path, rows), category="preference")
    assert report.verdict == "WARN" and "1 of 8 rows" in report.check("pairs").detail
    assert "first: row 2" in report.check("pairs").detail
    mapped = {"chosen": "answer", "rejected": "answer"}
    same = write(tmp_path, [{"prompt": f"p{i}", "answer": "a"} for i in range(8)], "same.jsonl")
    report = validate_dataset(same, category="preference", column_mapping=mapped)
    assert report.verdict == "FAIL" and "mapped to the same column" in report.check("pairs").detail
    runs = tmp_path / "runs"
    argv = ["+algo=dpo", "+env=dataset", f"env.path={same}", "model=tiny", f"paths.runs={runs}"]
    assert arena_run([*argv, "env.category=preference",
                      "env.column_mapping={chosen: answer, rejected: answer}"]) == 1  # fmt: skip
    assert "FAIL dataset.pairs" in " ".join(capsys.readouterr().err.split())
    assert not runs.exists() or not any(runs.iterdir())


def test_missing_file_fails_with_a_message(tmp_path):
    report = validate_dataset(str(tmp_path / "nope.jsonl"))
    assert report.verdict == "FAIL"
    assert report.check("load").detail


@pytest.mark.parametrize(
    "columns", [("prompt", "completion"), ("instruction", "output"), ("question", "answer")]
)
def test_the_offered_column_mapping_is_the_fix(tmp_path, columns):
    """The mapping a missing-column error offers, applied as it is, makes the file load, in
    `arena validate dataset` and in training; it never maps a column that is already one of the
    category's (`prompt` + `completion`: `response` <- `completion`, not `prompt`)."""
    import re

    from arena_core.data import DatasetError, load_dataset

    path = write(tmp_path, [{columns[0]: f"q{i}", columns[1]: f"a{i}"} for i in range(4)])
    detail = validate_dataset(path, category="sft").check("columns").detail
    offered = json.loads(re.search(r"--column-mapping '(\{.*\})'", detail).group(1))
    assert validate_dataset(path, category="sft", column_mapping=offered).verdict == "PASS"
    with pytest.raises(DatasetError) as err:
        load_dataset(path, "sft")
    trained = json.loads(re.search(r"--column-mapping '(\{.*\})'", str(err.value)).group(1))
    rows = load_dataset(path, "sft", trained)
    assert [(r["prompt"], r["response"]) for r in rows] == [(f"q{i}", f"a{i}") for i in range(4)]


def test_arena_run_offers_the_mapping_as_an_override_it_takes(tmp_path, capsys, monkeypatch):
    """The pre-flight of `arena-run` offers the fix as an `arena-run` argument (Hydra's dict
    syntax), not `arena validate`'s --column-mapping flag; typed as offered, the run passes."""
    import re
    import shlex

    from arena_core.cli.run import main

    monkeypatch.chdir(tmp_path)
    rows = [{"prompt": f"q{i}", "my answer": f"a{i}"} for i in range(4)]
    path = write(tmp_path, rows)
    run = ["+algo=sft", "+env=dataset", f"env.path={path}", "model=tiny", "dry_run=true"]
    assert main(run) == 1
    err = capsys.readouterr().err
    assert "--column-mapping" not in err
    offered = re.search(r"Map yours with ('env\.column_mapping=\{.*?\}')", err).group(1)
    assert offered == """'env.column_mapping={response: "my answer"}'"""
    assert main([*run, *shlex.split(offered)]) == 0
    assert "pre-flight: PASS" in capsys.readouterr().out


def test_validate_env_on_sft_or_preference_data_checks_the_rows(tmp_path, capsys):
    """`arena validate env dataset env.path=...` on DPO or SFT rows: not a text task, so the
    verdict is the dataset's checks (it FAILed 'not a text task' on any good file)."""
    from arena_core.cli.main import main as arena

    prefs = write(tmp_path, [{"prompt": f"p{i}", "chosen": "a", "rejected": "b"} for i in range(8)])
    demos = write(tmp_path, [{"prompt": f"p{i}", "response": "r"} for i in range(8)], "s.jsonl")
    for path, category in ((prefs, "preference"), (demos, "sft")):
        assert arena(["validate", "env", "dataset", f"env.path={path}", "--json"]) == 0
        checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
        assert checks["kind"]["detail"].startswith(f"{category} data for +algo=")
        assert checks["dataset.columns"]["status"] == "PASS"
    same = write(tmp_path, [{"prompt": f"p{i}", "chosen": "a", "rejected": "a"} for i in range(8)])
    assert arena(["validate", "env", "dataset", f"env.path={same}", "--json"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["dataset.pairs"]["status"] == "FAIL"

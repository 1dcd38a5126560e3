"""load_dataset: every format, the column mapping, and errors that name the file and column."""

from __future__ import annotations

import json
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arena_core.data import DatasetError, load_dataset

ROWS = [{"q": "1+1?", "a": "#### 2", "extra": 1}, {"q": "2+3?", "a": "#### 5", "extra": 2}]
MAP = {"question": "q", "answer": "a"}


def _write(tmp_path, fmt: str, rows=ROWS):
    path = tmp_path / f"train.{fmt}"
    if fmt == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":
        header = list(rows[0]) if rows else ["q", "a"]
        lines = [",".join(header)] + [",".join(str(r[k]) for k in header) for r in rows]
        path.write_text("\n".join(lines) + "\n")
    else:
        pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({"q": [], "a": []}), path)
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_each_format_with_mapping(tmp_path, fmt) -> None:
    rows = load_dataset(str(_write(tmp_path, fmt)), "reasoning", MAP)
    assert rows == [
        {"question": "1+1?", "answer": "#### 2"},
        {"question": "2+3?", "answer": "#### 5"},
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
def test_a_file_saved_with_a_byte_order_mark_loads(tmp_path, fmt, capsys) -> None:
    """Excel's "CSV UTF-8" and Windows editors start a file with a UTF-8 byte-order mark and end
    lines with CRLF: training's loader and `arena validate dataset` read it as any UTF-8 file
    (read as plain UTF-8, the mark breaks the first JSON line, or names the first CSV column
    "\\ufeffquestion")."""
    from arena_core.cli.main import main as arena

    rows = [{"question": f"{i}+{i}?", "answer": f"#### {2 * i}"} for i in range(3)]
    if fmt == "jsonl":
        text = "".join(json.dumps(r) + "\r\n" for r in rows)
    else:
        text = "question,answer\r\n" + "".join(f"{r['question']},{r['answer']}\r\n" for r in rows)
    path = tmp_path / f"excel.{fmt}"
    path.write_bytes(text.encode("utf-8-sig"))
    assert load_dataset(str(path), "reasoning") == rows
    assert arena(["validate", "dataset", str(path), "--category", "reasoning", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"


def _shapes(rows: list[dict]) -> dict[str, str]:
    """The same rows as the files other tools write: file name -> text."""
    cols = list(rows[0])
    return {
        "semicolon.csv": ";".join(cols) + "\n" + "".join(";".join(r.values()) + "\n" for r in rows),
        "tabs.tsv": "\t".join(cols) + "\n" + "".join("\t".join(r.values()) + "\n" for r in rows),
        "pipes.csv": "|".join(cols) + "\n" + "".join("|".join(r.values()) + "\n" for r in rows),
        # pandas DataFrame.to_json() (orient="columns") and DataFrame.to_dict("list")
        "pandas.json": json.dumps({c: {str(i): r[c] for i, r in enumerate(rows)} for c in cols}),
        "by_column.json": json.dumps({c: [r[c] for r in rows] for c in cols}),
        "wrapped.json": json.dumps({"data": rows}, indent=2),
        "pretty.json": json.dumps(rows, indent=2),
    }


def test_files_other_tools_write_load_in_training_and_validation(tmp_path) -> None:
    """A European Excel's `;` CSV, a TSV, a pandas `to_json()` table, a `{"data": [...]}` file:
    each loads the rows it holds, in training and in `arena validate dataset` (read as a plain
    comma CSV or as JSON lines, each was one garbled column, one row of dicts, or a parse error)."""
    from arena_core.validate import validate_dataset

    rows = [{"question": f"{i} + 1 = ?", "answer": f"#### {i + 1}"} for i in range(3)]
    for name, text in _shapes(rows).items():
        path = tmp_path / name
        path.write_text(text)
        assert load_dataset(str(path), "reasoning") == rows, name
        assert validate_dataset(str(path)).verdict == "PASS", (
            name,
            validate_dataset(str(path)).summary(),
        )


def test_directory_split_and_canonical_names(tmp_path) -> None:
    (tmp_path / "test.jsonl").write_text(json.dumps({"prompt": "p", "response": "t"}) + "\n")
    assert load_dataset(str(tmp_path), "sft", split="test") == [{"prompt": "p", "response": "t"}]
    with pytest.raises(DatasetError, match="no 'train' file"):
        load_dataset(str(tmp_path), "sft")


def test_preference_category_and_non_string_values(tmp_path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "x", "chosen": 1, "rejected": 2.5}) + "\n")
    assert load_dataset(str(path), "preference") == [
        {"prompt": "x", "chosen": "1", "rejected": "2.5"}
    ]


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_missing_column_names_file_column_and_fix(tmp_path, fmt) -> None:
    path = _write(tmp_path, fmt)
    with pytest.raises(DatasetError) as err:
        load_dataset(str(path), "reasoning")
    msg = str(err.value)
    assert str(path) in msg and "'question'" in msg and "'q'" in msg and "--column-mapping" in msg


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet"])
def test_empty_dataset(tmp_path, fmt) -> None:
    path = _write(tmp_path, fmt, rows=[])
    with pytest.raises(DatasetError, match="empty") as err:
        load_dataset(str(path), "reasoning", MAP)
    assert str(path) in str(err.value)


def test_unreadable_files_name_the_path(tmp_path) -> None:
    bad_json = tmp_path / "bad.jsonl"
    bad_json.write_text('{"q": 1}\n{not json\n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl.*line 2"):
        load_dataset(str(bad_json), "reasoning")
    bad_parquet = tmp_path / "bad.parquet"
    bad_parquet.write_bytes(b"not parquet at all")
    with pytest.raises(DatasetError, match=r"bad\.parquet"):
        load_dataset(str(bad_parquet), "reasoning")
    with pytest.raises(DatasetError, match="not found"):
        load_dataset(str(tmp_path / "missing.csv"), "reasoning")
    odd = tmp_path / "data.xlsx"
    odd.write_text("x")
    with pytest.raises(DatasetError, match="unknown extension"):
        load_dataset(str(odd), "reasoning")


def test_null_value_and_bad_mapping_and_category(tmp_path) -> None:
    path = tmp_path / "n.jsonl"
    path.write_text(json.dumps({"question": "q", "answer": None}) + "\n")
    with pytest.raises(DatasetError, match="row 1"):
        load_dataset(str(path), "reasoning")
    with pytest.raises(DatasetError, match="canonical"):
        load_dataset(str(path), "reasoning", {"quest": "q"})
    with pytest.raises(DatasetError, match="Categories"):
        load_dataset(str(path), "chat")


def test_hub_id_fails_fast_offline(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(DatasetError, match=r"\+experiment=quickstart"):
        load_dataset("openai/gsm8k", "reasoning", config="main")
    assert time.perf_counter() - start < 10

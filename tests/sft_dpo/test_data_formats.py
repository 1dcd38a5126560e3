"""sft and preference data in every format training reads (JSONL, CSV, parquet, a Hugging Face
dataset saved to disk), loaded by the same code for training and `arena validate dataset`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from arena_core.data import DatasetError, load_dataset
from arena_core.validate import validate_dataset
from arena_envs.dataset import DatasetEnvConfig, DatasetTask


def chat(i: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"What is {i} + 1?"},
        {"role": "assistant", "content": str(i + 1)},
        {"role": "user", "content": "Times 3?"},
        {"role": "assistant", "content": str(3 * (i + 1))},
    ]


CHAT = chat(0)
ROWS = {
    "sft": [{"instruction": f"q{i}", "output": f"a{i}"} for i in range(4)],
    "chat": [{"conversation": chat(i), "id": i} for i in range(4)],
    "preference": [{"prompt": f"q{i}", "chosen": "good", "rejected": "bad"} for i in range(4)],
}
MAPPING = {
    "sft": {"prompt": "instruction", "response": "output"},
    "chat": {"messages": "conversation"},
    "preference": None,
}
EXPECTED = {
    "sft": [{"prompt": f"q{i}", "response": f"a{i}"} for i in range(4)],
    "chat": [{"messages": chat(i)} for i in range(4)],
    "preference": ROWS["preference"],
}


def _write(tmp_path: Path, kind: str, fmt: str) -> Path:
    rows = ROWS[kind]
    if fmt == "jsonl":
        path = tmp_path / "train.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "csv":  # a chat column is a JSON string in a CSV cell
        path = tmp_path / "train.csv"
        with path.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            for r in rows:
                writer.writerow(
                    {k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()}
                )
    elif fmt == "parquet":
        path = tmp_path / "train.parquet"
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:  # save_to_disk: a DatasetDict with train and test splits
        import datasets

        path = tmp_path / "saved"
        ds = datasets.Dataset.from_list(rows)
        datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(path))
    return path


@pytest.mark.parametrize("fmt", ["jsonl", "csv", "parquet", "save_to_disk"])
@pytest.mark.parametrize("kind", ["sft", "chat", "preference"])
def test_training_and_validation_read_every_format(tmp_path: Path, kind: str, fmt: str):
    path = _write(tmp_path, kind, fmt)
    category = "preference" if kind == "preference" else "sft"
    assert load_dataset(str(path), category, MAPPING[kind]) == EXPECTED[kind]
    report = validate_dataset(str(path), category=category, column_mapping=MAPPING[kind])
    assert report.verdict == "PASS", report.summary()
    assert report.check("training load").status == "PASS"
    task = DatasetTask(
        DatasetEnvConfig(
            path=str(path), category=category, column_mapping=MAPPING[kind], eval_size=1
        )
    )
    assert len(task.train_rows) == 3 and task.eval_rows[0] in EXPECTED[kind]


def test_saved_dataset_splits(tmp_path: Path):
    path = _write(tmp_path, "preference", "save_to_disk")
    assert load_dataset(str(path), "preference", split="test") == EXPECTED["preference"]
    with pytest.raises(DatasetError, match=r"no split 'valid'.*\['train', 'test'\]"):
        load_dataset(str(path), "preference", split="valid")


def test_bad_rows_name_file_row_and_column_in_training_and_validation(tmp_path: Path):
    path = tmp_path / "chats.jsonl"
    bad = [{"role": "user", "content": "hi"}, {"role": "bot", "content": "hello"}]
    rows = [{"conversation": CHAT}, {"conversation": bad}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DatasetError) as err:
        load_dataset(str(path), "sft", {"messages": "conversation"})
    msg = str(err.value)
    assert str(path) in msg and "row 2" in msg and "'conversation'" in msg and "'bot'" in msg
    report = validate_dataset(
        str(path), category="sft", column_mapping={"messages": "conversation"}
    )
    assert report.verdict == "FAIL" and report.check("training load").detail == msg
    # prompt + response rows without a response: the column and the fix are named
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"prompt": "p", "target": "t"}) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset(str(plain), "sft")
    msg = str(err.value)
    assert str(plain) in msg and "'response'" in msg and "'target'" in msg and "messages" in msg

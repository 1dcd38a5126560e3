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


def _conversation(question: str, answer: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer},
    ]


def test_trl_conversational_preference_rows_load_as_prompt_turns_and_answers(tmp_path: Path):
    """UltraFeedback's form (a text `prompt` beside `chosen`/`rejected` conversations) and TRL's
    explicit one (the `prompt` a list of turns, each answer a list holding the assistant turn)
    give the conversation's turns as the prompt and the last assistant turns as the answers, in
    training and in `arena validate dataset` (read as text, they would be Python reprs)."""
    from arena_core.sft_dpo.data import SftDpoData

    ultra = tmp_path / "ultra.jsonl"
    explicit = tmp_path / "explicit.jsonl"
    with ultra.open("w") as u, explicit.open("w") as e:
        for i in range(6):
            q = f"What is {i} + 1?"
            row = {"prompt": q, "chosen": _conversation(q, str(i + 1))}
            row["rejected"] = _conversation(q, str(i + 2))
            u.write(json.dumps(row) + "\n")
            turns = _conversation(q, "")[:2]
            answers = {
                k: [{"role": "assistant", "content": str(i + d)}]
                for k, d in (("chosen", 1), ("rejected", 2))
            }
            e.write(json.dumps({"prompt": turns, **answers}) + "\n")
    for path in (ultra, explicit):
        rows = load_dataset(str(path), "preference")
        assert rows[2] == {
            "prompt": _conversation("What is 2 + 1?", "")[:2],
            "chosen": "3",
            "rejected": "4",
        }
        assert validate_dataset(str(path), category="preference").verdict == "PASS"
        task = DatasetTask(DatasetEnvConfig(path=str(path), category="preference", eval_size=2))
        row = SftDpoData(task, 2, "dataset").rows[
            0
        ]  # the prompt is the row's turns, not the env's template
        assert row.messages[0]["content"] == "You add numbers." and row.chosen.isdigit()

    # answers to two different conversations, and a conversation that ends with the user
    bad = tmp_path / "bad.jsonl"
    row = {"prompt": "q", "chosen": _conversation("q", "1"), "rejected": _conversation("r", "2")}
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=r"row 1: 'chosen' and 'rejected' must answer the same"):
        load_dataset(str(bad), "preference")
    row["rejected"] = _conversation("q", "2")[:2]
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(DatasetError, match=r"row 1, column 'rejected': the last turn must be"):
        load_dataset(str(bad), "preference")
    # turns in one sft column and text in the other: the messages column is named
    sft = tmp_path / "sft.jsonl"
    sft.write_text(json.dumps({"prompt": _conversation("q", "1")[:2], "response": "1"}) + "\n")
    with pytest.raises(
        DatasetError, match=r"row 1: 'prompt' and 'response' must both be.*'messages'"
    ):
        load_dataset(str(sft), "sft")


def test_trl_conversational_prompt_completion_rows_train_on_the_completion(tmp_path: Path):
    """TRL's conversational prompt-completion sft rows (`prompt` and `completion` lists of turns)
    are the chat of the two whose loss falls on the completion only: an assistant turn inside
    the prompt is context, in training and in `arena validate dataset`."""
    from arena_core.models import load_policy
    from arena_core.sft_dpo.data import Encoder

    path = tmp_path / "prompt_completion.jsonl"
    with path.open("w") as f:
        for i in range(4):
            prompt = [
                {"role": "user", "content": f"What is {i} + 1?"},
                {"role": "assistant", "content": str(i + 1)},
                {"role": "user", "content": "Times 3?"},
            ]
            completion = [{"role": "assistant", "content": str(3 * (i + 1))}]
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")
    rows = load_dataset(str(path), "sft", {"response": "completion"})
    assert [t["role"] for t in rows[0]["messages"]] == ["user", "assistant", "user", "assistant"]
    report = validate_dataset(str(path), category="sft", column_mapping={"response": "completion"})
    assert report.verdict == "PASS", report.summary()
    tok = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}}).tokenizer
    (sample,) = Encoder(tok, 1024).chat(rows[1]["messages"])
    pairs = zip(sample.completion_ids, sample.loss_mask, strict=True)
    assert tok.decode([t for t, m in pairs if m]) == "6<|im_end|>"  # the completion alone


def test_sharegpt_conversations_load_with_the_offered_mapping(tmp_path: Path):
    """ShareGPT's files (a `conversations` column of `{"from", "value"}` turns, as axolotl and
    LLaMA-Factory read them): the missing-column error offers `{"messages": "conversations"}`,
    and with it the speakers load as roles (human -> user, gpt -> assistant), in training and in
    `arena validate dataset`; an unknown speaker is named with the row and turn."""
    import re

    path = tmp_path / "sharegpt.jsonl"
    with path.open("w") as f:
        for i in range(4):
            turns = [
                {"from": "system", "value": "You add numbers."},
                {"from": "human", "value": f"What is {i} + 1?"},
                {"from": "gpt", "value": str(i + 1)},
            ]
            f.write(json.dumps({"conversations": turns, "id": i}) + "\n")
    with pytest.raises(DatasetError) as err:
        load_dataset(str(path), "sft")
    offered = json.loads(re.search(r"--column-mapping '(\{.*\})'", str(err.value)).group(1))
    assert offered == {"messages": "conversations"}
    detail = validate_dataset(str(path), category="sft").check("columns").detail
    assert '{"messages": "conversations"}' in detail
    rows = load_dataset(str(path), "sft", offered)
    assert rows[1]["messages"] == [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "What is 1 + 1?"},
        {"role": "assistant", "content": "2"},
    ]
    assert validate_dataset(str(path), category="sft", column_mapping=offered).verdict == "PASS"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"conversations": [{"from": "bot", "value": "hi"}]}) + "\n")
    with pytest.raises(DatasetError, match=r"row 1, column 'conversations', turn 0: unknown Share"):
        load_dataset(str(bad), "sft", offered)


def test_a_tool_tasks_demonstrations_carry_the_listing_its_episodes_show() -> None:
    """Under env.tools_in_prompt a tool env's episode prompts list its tools (the episode
    runner); its SFT warm start trains behind the same prompt, not one without them."""
    from arena_core.run_parts.build import build_task
    from arena_core.sft_dpo.data import SftDpoData

    for listed in (False, True):
        task = build_task({"name": "tool_calc", "tools": "python", "tools_in_prompt": listed})
        data = SftDpoData(task, 2, "dataset")
        row = next(data.stream(0))
        system = row.messages[0]["content"] if row.messages[0]["role"] == "system" else ""
        assert ("add(a: number, b: number) - Add two numbers: a + b." in system) is listed
        assert ("Tools:" in str(data.eval_rows[0].messages)) is listed

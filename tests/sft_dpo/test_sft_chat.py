"""SFT on multi-turn chats: only assistant tokens carry loss, and every assistant turn counts."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from arena_algorithms.sft import SFT
from arena_core.cli.run import execute
from arena_core.learn.learner import Learner
from arena_core.models import load_policy
from arena_core.sft_dpo.data import Encoder

CHAT = [
    {"role": "system", "content": "You add numbers."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "<answer>5</answer>"},
    {"role": "user", "content": "And 4 + 4?"},
    {"role": "assistant", "content": "<answer>8</answer>"},
]


def _ids(tok, messages, **kw) -> list[int]:
    out = tok.apply_chat_template(messages, tokenize=True, return_dict=False, **kw)
    return list(out["input_ids"] if isinstance(out, dict) else out)


@pytest.fixture(scope="module")
def tiny():
    return load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}})


def _trained_positions(tok, sample) -> list[int]:
    """Positions in the whole rendered chat whose token the sample trains on."""
    full = _ids(tok, CHAT)
    seq = sample.prompt_ids + sample.completion_ids
    assert full[: len(seq)] == seq  # the sample is the chat as the template renders it
    mask = sample.loss_mask or [1] * len(sample.completion_ids)
    return [len(sample.prompt_ids) + j for j, m in enumerate(mask) if m]


def test_every_assistant_turn_and_nothing_else_carries_loss(tiny):
    tok = tiny.tokenizer
    (sample,) = Encoder(tok, 1024).chat(CHAT)  # one sequence, masked
    assert sample.prompt_ids == _ids(tok, CHAT[:2], add_generation_prompt=True)
    full = _ids(tok, CHAT)
    trained = tok.decode([full[i] for i in _trained_positions(tok, sample)])
    assert trained == "<answer>5</answer><|im_end|><answer>8</answer><|im_end|>"
    pairs = zip(sample.completion_ids, sample.loss_mask, strict=True)
    context = tok.decode([t for t, m in pairs if not m])
    assert "And 4 + 4?" in context and "user" in context  # the second user turn: context only
    # a cut conversation: the second reply falls past max_length and carries no loss
    second_start = len(_ids(tok, CHAT[:4], add_generation_prompt=True))
    (cut,) = Encoder(tok, second_start).chat(CHAT)
    assert tok.decode([full[i] for i in _trained_positions(tok, cut)]) == (
        "<answer>5</answer><|im_end|>"
    )


def test_a_template_that_rewrites_history_gets_one_sample_per_turn(tiny):
    """When renderings are not prefixes of one another, each assistant turn is its own sample
    whose context is the conversation before it: the same tokens carry loss."""
    tok = copy.deepcopy(tiny.tokenizer)
    tok.chat_template = "{{ messages | length }}" + tok.chat_template  # changes every prefix
    samples = Encoder(tok, 1024).chat(CHAT)
    assert [tok.decode(s.completion_ids) for s in samples] == [
        "<answer>5</answer><|im_end|>",
        "<answer>8</answer><|im_end|>",
    ]
    assert samples[1].prompt_ids == _ids(tok, CHAT[:4], add_generation_prompt=True)


def test_chat_loss_is_the_masked_nll_of_the_whole_conversation(tiny, one_torch_thread):
    """The learner's loss equals one plain forward over the whole rendered chat with the
    system/user tokens masked out (token-mean)."""
    tok, model = tiny.tokenizer, tiny.model
    (sample,) = Encoder(tok, 1024).chat(CHAT)
    positions = _trained_positions(tok, sample)
    with torch.no_grad():
        ids = torch.tensor([_ids(tok, CHAT)])
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        tok_logp = logp.gather(-1, ids[0, 1:, None])[:, 0]
        expected = float(-tok_logp[torch.tensor(positions) - 1].mean())
    metrics = Learner(model, SFT({"lr": 1e-9}), micro_batch_tokens=64, tis_cap=None).step([sample])
    assert metrics["tokens/loss"] == len(positions)
    assert metrics["loss"] == pytest.approx(expected, rel=1e-4)


def test_sft_run_on_chat_rows(tmp_path: Path, tmp_runs: Path, common: list[str]):
    path = tmp_path / "chats.jsonl"
    with path.open("w") as f:
        for i in range(12):
            turns = [
                {"role": "user", "content": f"What is {i} + 1?"},
                {"role": "assistant", "content": f"<answer>{i + 1}</answer>"},
                {"role": "user", "content": "Double it."},
                {"role": "assistant", "content": f"<answer>{2 * (i + 1)}</answer>"},
            ]
            f.write(json.dumps({"conversation": turns}) + "\n")
    overrides = [
        "+algo=sft",
        "+env=dataset",
        f"env.path={path}",
        "env.column_mapping={messages: conversation}",
        "env.eval_size=4",
        "algo.lr=1e-4",
        "algo.batch_size=4",
        "train.max_steps=2",
        "eval.every=0",
        *common,
    ]
    assert execute(overrides) == 0
    (run,) = tmp_runs.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished"
    assert summary["eval_loss_final"] < summary["eval_loss_initial"]
    # 4 conversations x 2 assistant turns per step: both turns of every chat were trained on
    rows = (run / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    loss_tokens = float(rows[1].split(",")[header.index("tokens/loss")])
    enc = Encoder(load_policy({"name_or_path": "arena:tiny"}).tokenizer, 1024)
    per_chat = sum(sum(s.loss_mask) for s in enc.chat(turns))
    assert loss_tokens == pytest.approx(4 * per_chat, abs=4 * 2)  # digits vary by one token


def test_an_openai_fine_tuning_file_trains_as_written(tiny, tmp_path: Path, capsys):
    """OpenAI's chat fine-tuning format: a `developer` turn (the system role), content as a list
    of text parts, and `weight: 0` on an assistant turn that stays context: only the weighted
    turn carries loss, and `arena validate dataset` accepts the file; an image part is refused
    naming its row and turn."""
    from arena_core.cli.main import main as arena
    from arena_core.data import DatasetError, load_dataset

    row = [
        {
            "role": "developer",
            "content": [{"type": "text", "text": "You add "}, {"type": "text", "text": "numbers."}],
        },
        {"role": "user", "content": "What is 2 + 3?"},
        {"role": "assistant", "content": "<answer>5</answer>", "weight": 0},
        {"role": "user", "content": [{"type": "text", "text": "And 4 + 4?"}]},
        {"role": "assistant", "content": "<answer>8</answer>", "weight": 1},
    ]
    path = tmp_path / "openai.jsonl"
    others = [
        [*row[:1], {"role": "user", "content": f"What is {i} + 1?"}, *row[2:]] for i in range(3)
    ]
    path.write_text("".join(json.dumps({"messages": r}) + "\n" for r in [row, *others]))
    rows = load_dataset(str(path), "sft")
    assert len(rows) == 4
    tok = tiny.tokenizer
    (sample,) = Encoder(tok, 1024).chat(rows[0]["messages"])
    full = _ids(tok, CHAT)  # developer -> system, parts joined: the chat renders as CHAT does
    trained = tok.decode([full[i] for i in _trained_positions(tok, sample)])
    assert trained == "<answer>8</answer><|im_end|>"  # the weight-0 reply is context only
    assert arena(["validate", "dataset", str(path), "--category", "sft", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["verdict"] == "PASS"

    row[3]["content"] = [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]
    path.write_text(json.dumps({"messages": row}) + "\n")
    with pytest.raises(
        DatasetError, match=r"row 1, column 'messages', turn 3: a content part of type 'image_url'"
    ):
        load_dataset(str(path), "sft")

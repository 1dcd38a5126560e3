"""SFT: completion-only masking (checked against a plain forward pass) and a run end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from arena_core.cli.run import execute
from arena_core.learn.learner import Learner
from arena_core.models import load_policy
from arena_core.sft_dpo.data import Encoder

MESSAGES = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def tiny():
    return load_policy({"name_or_path": "arena:tiny", "dtype": "float32", "lora": {"r": 0}})


def test_completion_only_splits_at_the_prompt(tiny):
    tok = tiny.tokenizer
    prompt = tok.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    prompt = list(prompt["input_ids"] if isinstance(prompt, dict) else prompt)
    target = tok.encode("<answer>5</answer>", add_special_tokens=False) + [tok.eos_token_id]
    only = Encoder(tok, 1024, completion_only=True).sample(MESSAGES, "<answer>5</answer>")
    assert only.prompt_ids == prompt and only.completion_ids == target
    every = Encoder(tok, 1024, completion_only=False).sample(MESSAGES, "<answer>5</answer>")
    assert every.prompt_ids == prompt[:1] and every.completion_ids == prompt[1:] + target
    cut = Encoder(tok, len(prompt) + 2).sample(MESSAGES, "<answer>5</answer>")
    assert cut.completion_ids == target[:2]  # max_length cuts on the right


@pytest.mark.parametrize("completion_only", [True, False])
def test_sft_loss_is_the_nll_of_the_unmasked_tokens(tiny, one_torch_thread, completion_only):
    """The learner's SFT loss equals a plain forward's mean NLL over exactly the tokens the mask
    keeps: the completion, or every token after the first."""
    from arena_algorithms.sft import SFT

    enc = Encoder(tiny.tokenizer, 1024, completion_only=completion_only)
    samples = [enc.sample(MESSAGES, "<answer>5</answer>"), enc.sample(MESSAGES, "no idea")]
    model = tiny.model
    with torch.no_grad():
        nll, count = 0.0, 0
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.completion_ids])
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
            tgt = ids[0, 1:]
            start = len(s.prompt_ids) - 1
            nll -= float(logp[start:].gather(-1, tgt[start:, None]).sum())
            count += len(s.completion_ids)
    learner = Learner(model, SFT({"lr": 1e-9}), micro_batch_tokens=64, tis_cap=None)
    metrics = learner.step(samples)
    assert metrics["tokens/loss"] == count
    assert metrics["loss"] == pytest.approx(nll / count, rel=1e-4)


def test_sft_run_lowers_held_out_loss(sft_file: Path, tmp_runs: Path, common: list[str]):
    overrides = [
        "+algo=sft",
        "+env=dataset",
        f"env.path={sft_file}",
        "env.column_mapping={prompt: instruction, response: output}",
        "env.eval_size=8",
        "algo.lr=1e-4",
        "algo.batch_size=8",
        "train.max_steps=4",
        "eval.every=2",
        *common,
    ]
    assert execute(overrides) == 0
    (run,) = tmp_runs.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 4
    assert summary["eval_loss_final"] < summary["eval_loss_initial"]
    assert [e["step"] for e in summary["evals"]] == [0, 2, 4]
    header = (run / "metrics.csv").read_text().splitlines()[0]
    assert "eval/loss" in header and "tokens/loss" in header


def test_rows_longer_than_max_length_are_counted_and_named(
    tmp_path: Path, tmp_runs: Path, common: list[str], capsys
) -> None:
    """Rows are cut at algo.max_length, and a row whose prompt fills it keeps no loss token: it
    trains nothing. Each step says how many were cut (samples/cut, samples/no_loss) and the run
    ends with a warning naming the count, the longest length and the fix."""
    import csv

    path = tmp_path / "long.jsonl"
    rows = [
        # every other row: a prompt past the cut; every fourth: a completion past it
        {
            "prompt": f"q{i} " + "word " * (300 if i % 2 else 2),
            "response": "ok " * (200 if i % 4 == 0 else 1),
        }
        for i in range(32)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    overrides = ["+algo=sft", "+env=dataset", f"env.path={path}", "env.eval_size=4"]
    overrides += ["algo.batch_size=8", "algo.max_length=64", "train.max_steps=2", *common]
    assert execute(overrides) == 0
    (run,) = tmp_runs.iterdir()
    steps = list(csv.DictReader((run / "metrics.csv").open()))
    cut = sum(int(float(r["samples/cut"])) for r in steps)
    lost = sum(int(float(r["samples/no_loss"])) for r in steps)
    assert 0 < lost < cut <= 16
    (warning,) = json.loads((run / "summary.json").read_text())["warnings"]
    assert warning["code"] == "samples_cut"
    assert f"{cut} of 16 training samples were longer than algo.max_length=64" in warning["message"]
    assert f"{lost} of them were cut before their completion began" in warning["message"]
    assert "raise algo.max_length (above " in warning["fix"]
    assert "warning: " + warning["message"] in capsys.readouterr().out

"""The warm start: demonstrations, the SFT batches, and the shipped arena:tiny weights."""

from __future__ import annotations

import hashlib
import json

import torch

from arena_core.models import build_tiny_tokenizer, load_policy
from arena_core.models.tiny import WARM_WEIGHTS
from arena_core.models.warmstart import demo_completion, sft_batches
from arena_core.tasks import Example


def test_demo_from_a_gsm8k_reference_strips_calculator_notes() -> None:
    ex = Example(question="q", answer="48/2 = <<48/2=24>>24 clips.\n#### 72")
    assert demo_completion(ex) == "<think>48/2 = 24 clips.</think><answer>72</answer>"
    assert demo_completion(Example("q", "#### 1", meta={"demo": "<answer>1</answer>"})) == (
        "<answer>1</answer>"
    )


class _Task:
    def train_examples(self, seed: int):
        while True:
            yield Example(question="What is 1 + 2?", answer="1 + 2 = 3\n#### 3")

    def messages(self, example: Example) -> list[dict[str, str]]:
        return [{"role": "user", "content": example.question}]


def test_sft_batches_train_on_the_completion_and_eos_only() -> None:
    tok = build_tiny_tokenizer()
    batch = next(sft_batches(_Task(), tok, batch=2, seed=0))
    labels = batch["labels"][0]
    target = labels[labels != -100].tolist()
    assert tok.decode(target) == "<think>1 + 2 = 3</think><answer>3</answer><|im_end|>"
    assert batch["attention_mask"].sum() == 2 * (labels != -100).sum() + 2 * (
        batch["attention_mask"][0].sum() - (labels != -100).sum()
    )


def test_shipped_warm_weights_load_and_match_their_record() -> None:
    record = json.loads(WARM_WEIGHTS.with_suffix(".json").read_text())
    assert hashlib.sha256(WARM_WEIGHTS.read_bytes()).hexdigest() == record["sha256"]
    assert WARM_WEIGHTS.stat().st_size < 10_000_000
    warm = load_policy({"name_or_path": "arena:tiny", "lora": {"r": 0}})
    init = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": 0}})
    ids = torch.tensor([warm.tokenizer.encode("What is 1 + 2?")])
    with torch.no_grad():
        assert not torch.equal(warm.model(input_ids=ids).logits, init.model(input_ids=ids).logits)

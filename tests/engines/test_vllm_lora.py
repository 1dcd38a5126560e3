"""vLLM serves a LoRA population from one engine: one `generate` call, a LoRARequest per row.

Two members' adapters (random B, far apart, so their greedy outputs differ) and base-model rows
are mixed in one call; every row must equal the torch engine's greedy output for that row's own
adapter (fp32: vLLM's greedy equals torch's). Base rows are the trap: vLLM's CPU LoRA ops read a
row without an adapter (slot -1) as the last slot's adapter, so without the backend's all-zero
base adapter they decode as a member. One engine for the module (start 20-70 s on 2 cores).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.multi_lora import BASE, generate_population
from arena_core.engines.torch_backend import TorchBackend
from tests.engines.test_vllm_backend import PROMPTS, _tiny_model

HAS_VLLM = importlib.util.find_spec("vllm") is not None
MEMBERS = ["m0", "m1"]
RANK = 8


@pytest.fixture(scope="module")
def population(tmp_path_factory: pytest.TempPathFactory):
    """The tiny vLLM-shaped Qwen2 saved as the base, two LoRA members saved as peft adapters."""
    if not HAS_VLLM:
        pytest.skip("vLLM not installed (pip install 'arena-rl[vllm]')")
    from peft import LoraConfig, get_peft_model

    model, tok = _tiny_model()
    root = tmp_path_factory.mktemp("vllm-lora")
    model.save_pretrained(root / "base")
    tok.save_pretrained(root / "base")
    spec = {"r": RANK, "lora_alpha": 16, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    lora = get_peft_model(model, LoraConfig(**spec), adapter_name=MEMBERS[0])
    lora.add_adapter(MEMBERS[1], LoraConfig(**spec))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)
    for m in MEMBERS:  # peft writes a non-default adapter to adapters/<name>/
        lora.save_pretrained(root / "adapters", selected_adapters=[m])
    prompts = [tok.encode(p, add_special_tokens=False) for p in PROMPTS]
    return lora.eval(), tok, root, prompts


@pytest.fixture(scope="module")
def engine(population):
    from arena_core.engines.vllm_backend import VLLMBackend

    _, _, root, _ = population
    backend = VLLMBackend(
        root / "base",
        dtype="float32",
        max_model_len=256,
        kv_cache_gib=0.25,
        cpu_reserved_cores=0,
        # one slot more than the members: base rows are served by an all-zero adapter
        engine_kwargs={"enable_lora": True, "max_loras": len(MEMBERS) + 1, "max_lora_rank": RANK},
    )
    for m in MEMBERS:
        backend.add_lora(m, root / "adapters" / m)
    yield backend
    backend.close()


def test_one_call_serves_each_row_with_its_own_adapter(population, engine) -> None:
    model, tok, _, prompts = population
    params = SamplingParams(max_new_tokens=8, temperature=0)
    torch_engine = TorchBackend(model, tok, device="cpu")
    want = generate_population(torch_engine, {m: prompts for m in [*MEMBERS, BASE]}, params)
    outs = {m: [c.token_ids for c in want[m]] for m in want}
    # the members really differ from each other and from the base
    assert outs["m0"] != outs["m1"] and outs[BASE] not in (outs["m0"], outs["m1"])
    # rows interleave the members and the base within ONE generate call
    rows = [(m, p) for p in range(len(prompts)) for m in (*MEMBERS, BASE)]
    got = engine.generate([prompts[p] for _, p in rows], params, adapters=[m for m, _ in rows])
    for (member, p), completion in zip(rows, got, strict=True):
        assert completion.token_ids == outs[member][p], (member, p)

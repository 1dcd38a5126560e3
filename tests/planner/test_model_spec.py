"""Model specs from config.json: parameter counts against the published sizes.

Fixture configs carry the public config.json values of each model (Hugging Face model cards:
Qwen/Qwen2.5-0.5B, Qwen/Qwen3-30B-A3B, meta-llama/Meta-Llama-3-8B, mistralai/Mixtral-8x7B-v0.1,
Qwen/Qwen1.5-MoE-A2.7B, deepseek-ai/DeepSeek-V2-Lite, Qwen/Qwen3-0.6B).
"""

from __future__ import annotations

import time

import pytest

from arena_core.errors import ArenaError
from arena_core.planner import ModelSpec

from .conftest import CONFIGS, spec


@pytest.mark.parametrize(
    ("name", "total_b", "active_b"),
    [
        ("qwen2.5-0.5b", 0.49, 0.49),  # model card: 0.49B
        ("llama-3-8b", 8.03, 8.03),  # 8.03B
        ("qwen3-30b-a3b", 30.5, 3.3),  # model card: 30.5B total, 3.3B activated
        ("mixtral-8x7b", 46.7, 12.9),  # Mistral: 46.7B total, 12.9B active
        ("qwen1.5-moe-a2.7b", 14.3, 2.7),  # model card: 14.3B total, 2.7B activated
        ("qwen2.5-72b", 72.7, 72.7),  # 72.7B
    ],
)
def test_parameter_counts_match_published(name, total_b, active_b):
    m = spec(name)
    assert m.total_params / 1e9 == pytest.approx(total_b, rel=0.02)
    assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.04)


def test_moe_fields_and_mla():
    q = spec("qwen3-30b-a3b")
    assert (q.num_experts, q.experts_per_token, q.moe_intermediate_size) == (128, 8, 768)
    assert q.num_moe_layers == 48 and q.head_dim == 128 and not q.tie_embeddings
    shared = spec("qwen1.5-moe-a2.7b")
    assert shared.shared_expert_params > 0
    ds = spec("deepseek-v2-lite")  # 15.7B total; MLA caches kv_lora_rank + rope dims per layer
    assert ds.total_params / 1e9 == pytest.approx(15.7, rel=0.02)
    assert ds.num_dense_layers == 1 and ds.num_shared_experts == 2
    assert ds.kv_bytes_per_token(2) == 27 * (512 + 64) * 2


def test_gqa_head_dim_and_kv_bytes():
    q3 = spec("qwen3-0.6b")  # head_dim 128 although hidden/heads = 64
    assert q3.head_dim == 128 and q3.tie_embeddings
    llama = spec("llama-3-8b")  # 2 * 32 layers * 8 kv heads * 128 * 2 bytes = 128 KiB per token
    assert llama.kv_bytes_per_token(2) == 131072


def test_from_dict_and_dir_agree_and_bad_configs_are_user_errors(tmp_path):
    import json

    raw = json.loads((CONFIGS / "qwen2.5-0.5b" / "config.json").read_text())
    assert ModelSpec.from_hf_config(raw).total_params == spec("qwen2.5-0.5b").total_params
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ArenaError, match="cannot read"):
        ModelSpec.from_hf_config(tmp_path)
    with pytest.raises(ArenaError, match="lacks"):
        ModelSpec.from_dict({"model_type": "bert"})


def test_hub_id_offline_fails_fast_with_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ArenaError, match="hub lookup failed"):
        ModelSpec.from_hf_config("no-such-org/no-such-model-xyz")
    assert time.perf_counter() - start < 15

"""The plan's cost terms follow a real model's shape (issue 22, item 4).

A tiny random Llama built from SmolLM2-135M-Instruct's config shape (GQA 4/2, head_dim set, tied
embeddings) must be counted exactly by the model spec, and each term of the plan must move with the
one shape field it depends on: layers (decode, learn, KV), GQA (KV cache only), vocabulary (the LM
head's FLOPs, tied or not) and tied embeddings (memory, never FLOPs). SmolLM2's own shipped config
is planned too: no weights are needed for any of it.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from arena_core.planner import ModelSpec, make_plan
from arena_core.planner.coefficients import coefficients_for
from arena_core.planner.hardware import cpu_profile
from arena_core.planner.live import at_current_rates
from arena_core.planner.plan import Workload
from arena_core.planner.search import predict_plan

from .conftest import SMOLLM2_STEP, spec

ROOT = Path(__file__).resolve().parents[2]
HW = cpu_profile(cores=2, memory_gb=16, matmul_tflops=0.111, mem_bandwidth_gbs=63.0)
WL = Workload(
    2, 4, prompt_tokens=42, completion_tokens=32, overlap=False, engine_shares_module=True
)


def _real_arch():
    path = ROOT / "tests" / "models" / "real_arch.py"
    mod = importlib.util.spec_from_file_location("real_arch_for_planner", path)
    module = importlib.util.module_from_spec(mod)
    sys.modules[mod.name] = module
    mod.loader.exec_module(module)
    return module


def smollm2(**change) -> ModelSpec:
    cfg = spec("smollm2-135m").model_dump()
    cfg.update(change)
    return ModelSpec(**cfg)


def predict(m: ModelSpec, lora: int = 16):
    """The plan a SmolLM2 quickstart gets, priced with the shipped CPU coefficients."""
    coef = coefficients_for(HW).model_copy(update={"learn_layer_overhead_s": 0.0})
    best = make_plan(m, HW, 1, WL, lora_rank=lora, coefficients=coef)
    return predict_plan(m, HW, best.plan, WL, coef).prediction, best.plan


def test_the_spec_counts_a_tiny_llama_of_smollm2_shape_exactly():
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=400, **_real_arch().SHAPE))
    m = ModelSpec.from_dict(model.config.to_dict(), name="tiny-smollm2-shape")
    assert (m.num_heads, m.num_kv_heads, m.head_dim, m.tie_embeddings) == (4, 2, 16, True)
    assert m.total_params == sum(p.numel() for p in model.parameters())
    real = spec("smollm2-135m")
    assert abs(real.total_params - 134_515_008) < 1e5  # the GGUF's 134.5M, tied embeddings
    assert real.kv_bytes_per_token(4) == 2 * 30 * 3 * 64 * 4


def test_layers_drive_decode_learn_and_kv():
    base, plan = predict(smollm2())
    deep, _ = predict(smollm2(num_layers=60))
    layer_share = 30 * smollm2().layer_params / smollm2().flop_params  # 79%: the head is the rest
    for key in ("generate_s", "learn_s"):
        ratio = getattr(deep, key) / getattr(base, key)
        assert 1 + 0.7 * layer_share < ratio < 2.05, (key, ratio)
    assert deep.engine_memory["kv_cache"] == pytest.approx(2 * base.engine_memory["kv_cache"])


def test_gqa_changes_the_kv_cache_not_the_learner():
    gqa, _ = predict(smollm2())  # 9 query heads share 3 KV heads
    mha, _ = predict(smollm2(num_kv_heads=9))
    assert mha.engine_memory["kv_cache"] == pytest.approx(3 * gqa.engine_memory["kv_cache"])
    # full K/V projections add 2*h*(9-3)*64 parameters per layer: more FLOPs, a little
    extra = 30 * 2 * 576 * 6 * 64 / smollm2().flop_params
    assert mha.learn_s / gqa.learn_s == pytest.approx(1 + extra, rel=0.02)


def test_the_lm_head_costs_flops_whether_tied_or_not_and_memory_only_untied():
    tied, _ = predict(smollm2(), lora=0)
    untied, _ = predict(smollm2(tie_embeddings=False), lora=0)
    # one h x V matmul either way; only AdamW steps the extra table (32 B read+written per param)
    adam = 32 * 49152 * 576 / (63e9 * coefficients_for(HW).optimizer_bw_efficiency)
    assert untied.learn_s - tied.learn_s == pytest.approx(adam, rel=1e-3)
    assert untied.generate_s == pytest.approx(tied.generate_s)  # the input table is looked up
    head = 49152 * 576 * 4  # fp32 on the CPU
    assert untied.trainer_memory["weights"] - tied.trainer_memory["weights"] == pytest.approx(head)
    small_vocab, _ = predict(smollm2(vocab_size=4096), lora=0)
    head_share = 45056 * 576 / smollm2().flop_params  # the FLOPs the smaller head saves
    assert small_vocab.learn_s / tied.learn_s == pytest.approx(1 - head_share, rel=0.05)


def test_lora_skips_weight_gradients_and_the_engine_shares_the_trainers_weights():
    lora, plan = predict(smollm2(), lora=16)
    full, _ = predict(smollm2(), lora=0)
    assert plan.colocate == "shared"
    assert lora.learn_s / full.learn_s == pytest.approx(4 / 6, rel=0.05)  # 4N vs 6N per token
    # the torch engine generates with the module, a LoRA model through merged copies of the
    # adapted q, k, v, o weights (rollout.merged_lora): those, in fp32, and nothing else
    qkvo = 30 * (2 * 576 * 576 + 2 * 576 * 192)
    assert lora.engine_memory["weights"] == pytest.approx(4 * qkvo)
    assert full.engine_memory["weights"] == 0.0
    assert full.trainer_memory["optimizer"] == pytest.approx(8 * smollm2().total_params)


def test_a_busy_machine_slows_every_term_by_the_measured_ratio():
    """Half the matmul rate (another job on the core) doubles the fixed overheads and halves the
    peak, so compute-bound terms double; the bandwidth the probe reads is used as measured."""
    m = smollm2()
    coef = coefficients_for(HW)
    idle, plan = predict(m)
    slow_hw, slow_coef = at_current_rates(
        HW, coef, {"matmul_tflops": HW.bf16_tflops / 2, "mem_bandwidth_gbs": 63.0 / 2}
    )
    assert slow_coef.source == coef.source
    busy = predict_plan(
        m, slow_hw, plan, WL, slow_coef.model_copy(update={"learn_layer_overhead_s": 0})
    )
    assert busy.prediction.learn_s / idle.learn_s == pytest.approx(2.0, rel=0.02)
    assert busy.prediction.generate_s / idle.generate_s == pytest.approx(2.0, rel=0.02)


def test_a_cpu_plan_from_a_config_is_priced_at_the_cpu_the_run_gets(monkeypatch):
    """What arena-run calls: on a busy machine every predicted second stretches by the speed
    the run gets, and the plan says so; ARENA_PLAN_PROBE=0 prices the idle machine."""
    from arena_core.planner import plan_from_config

    cfg = SMOLLM2_STEP
    idle = plan_from_config(cfg, prompt_tokens=42)
    assert idle.calibration == "shipped" and idle.priced_at_speed is None
    monkeypatch.setenv("ARENA_PLAN_PROBE", "1")
    local = cpu_profile()  # the shipped calibration's rates
    shipped = {"matmul_tflops": local.bf16_tflops, "mem_bandwidth_gbs": local.mem_bandwidth_gbs}
    read = local.mem_bandwidth_gbs * coefficients_for(local).decode_bw_efficiency
    # this machine probed as fast as the shipped calibration's: only the CPU share changes it
    monkeypatch.setattr(
        "arena_core.planner.machine_rates.probe", lambda: {**shipped, "decode_read_gbs": read}
    )
    monkeypatch.setenv("ARENA_PLAN_CPU_SHARE", "0.2")
    busy = plan_from_config(cfg, prompt_tokens=42)
    assert busy.calibration == "shipped" and busy.priced_at_speed["learn"] == 0.2
    assert "shipped CPU calibration at 20%/20% of an idle thread's" in busy.summary_line()
    note = next(n for n in busy.notes if n.startswith("priced at the CPU this run gets now"))
    assert "1 torch thread(s)" in note and "ARENA_PLAN_PROBE=0" in note
    assert busy.prediction.total_s == pytest.approx(idle.prediction.total_s / 0.2, rel=1e-3)
    assert busy.plan == idle.plan  # slower, not different
    assert busy.prediction.engine_memory["weights"] == 0.0  # torch engine: the trainer's module

"""Public-recipe cases: what the planner picks, and why.

Sources:
- 0.5B on one GPU: TRL's GRPOTrainer quickstart trains Qwen2-0.5B-Instruct on trl-lib/tldr on one
  GPU (model card huggingface.co/qgallouedec/Qwen2-0.5B-GRPO; TRL defaults num_generations=8,
  max_prompt_length=512, max_completion_length=256).
- Qwen3-30B-A3B on 8x H100: slime's example (thudm.github.io/slime/examples/qwen3-30B-A3B) needs
  Megatron's CPU Adam (--optimizer-cpu-offload) to fit full fine-tuning in 8x H800/H100, with
  --max-tokens-per-gpu 8192 and full recompute; 16 B/param x 30.5B = 488 GB, 122 GB per device on
  4 trainers, which no 80 GB device holds without offload.
"""

from __future__ import annotations

import time

import pytest

from arena_core.planner import BUILTIN_PROFILES, NoPlanFits, Workload, make_plan
from arena_core.planner.coefficients import Coefficients
from arena_core.planner.search import predict_plan

from .conftest import spec

H100 = BUILTIN_PROFILES["h100-80"]
GPU = Coefficients()  # the documented defaults: no calibration file is read in tests
TRL_QUICKSTART = Workload(
    prompts_per_step=8, group_size=8, prompt_tokens=512, completion_tokens=256
)
MOE_RL = Workload(prompts_per_step=32, group_size=8, prompt_tokens=1024, completion_tokens=2048)


def test_half_billion_model_on_one_gpu_needs_no_saving():
    res = make_plan(spec("qwen2.5-0.5b"), H100, 1, TRL_QUICKSTART, coefficients=GPU)
    p = res.plan
    assert (p.trainer_devices, p.engines, p.colocate) == (1, 1, "shared")
    assert p.offload == "none" and not p.activation_checkpointing
    mem = res.prediction.trainer_memory
    # 16 B/param full fine-tuning: 0.49B -> ~7.9 GB of weights+grads+optimizer
    assert (mem["weights"] + mem["grads"] + mem["optimizer"]) / 1e9 == pytest.approx(7.9, rel=0.03)
    assert res.prediction.peak_bytes <= res.prediction.usable_bytes


def test_qwen3_30b_full_finetune_cannot_fit_on_four_trainers_without_offload():
    m = spec("qwen3-30b-a3b")
    with pytest.raises(NoPlanFits) as err:
        make_plan(
            m, H100, 8, MOE_RL, pinned={"trainer_devices": 4, "offload": False}, coefficients=GPU
        )
    exc = err.value
    assert exc.exit_code != 0 and exc.nearest is not None
    assert exc.nearest.prediction.trainer_bytes > 80e9  # >= 16 B/param / 4 = 122 GB
    assert any("plan.offload=optimizer" in s for s in exc.suggestions), exc.suggestions
    # unpinned, the planner gives up what the slime recipe gives up: it offloads the optimizer
    res = make_plan(m, H100, 8, MOE_RL, coefficients=GPU)
    assert res.plan.offload != "none" or res.plan.colocate == "sleep"
    assert res.prediction.fits and res.prediction.peak_bytes <= res.prediction.usable_bytes


def test_qwen3_30b_lora_splits_trainers_and_engines_without_offload():
    m = spec("qwen3-30b-a3b")
    res = make_plan(m, H100, 8, MOE_RL, lora_rank=16, pinned={"colocate": False}, coefficients=GPU)
    p = res.plan
    assert 1 <= p.trainer_devices < 8 and p.engine_devices == 8 - p.trainer_devices
    assert p.offload == "none"
    # the LoRA trainer holds the frozen base at 2 B/param, sharded over its devices
    assert res.prediction.trainer_memory["weights"] == pytest.approx(
        2 * m.total_params / p.trainer_devices, rel=0.01
    )
    unpinned = make_plan(m, H100, 8, MOE_RL, lora_rank=16, coefficients=GPU)
    assert unpinned.prediction.total_s <= res.prediction.total_s + 1e-9


def test_pinned_setting_that_cannot_fit_is_reported_with_what_would():
    with pytest.raises(NoPlanFits) as err:
        make_plan(
            spec("llama-3-8b"),
            H100,
            2,
            TRL_QUICKSTART,
            pinned={"trainer_devices": 1, "offload": "none"},
            coefficients=GPU,
        )
    text = str(err.value)
    assert "plan.trainer_devices=1" in text and "What would fit" in text
    assert "Nearest plan" in text and err.value.suggestions


def test_no_plan_fits_names_the_nearest_plan():
    with pytest.raises(NoPlanFits) as err:
        make_plan(
            spec("qwen2.5-72b"), BUILTIN_PROFILES["l40s"], 1, TRL_QUICKSTART, coefficients=GPU
        )
    assert err.value.nearest is not None and "GB short" in str(err.value)
    assert "LoRA" in str(err.value)


def test_offload_comes_last():
    """7.6B full fine-tuning on one H100 (122 GB of state) must offload; a 0.5B model never does."""
    res = make_plan(spec("qwen2.5-7b"), H100, 1, TRL_QUICKSTART, coefficients=GPU)
    assert res.plan.offload != "none" or res.plan.colocate == "sleep"
    big = Workload(prompts_per_step=64, group_size=16, prompt_tokens=1024, completion_tokens=4096)
    small = make_plan(spec("qwen2.5-0.5b"), BUILTIN_PROFILES["a100-40"], 1, big, coefficients=GPU)
    assert small.plan.offload == "none"


def test_memory_savings_are_given_up_only_when_the_faster_setting_does_not_fit():
    """Shrinking memory turns on resharding before checkpointing before offload (DESIGN 5)."""
    m, wl = spec("llama-3-8b"), Workload(64, 8, 512, 1024)
    seen = []
    for mem_gb in (141, 80, 48, 40, 32, 24):
        hw = H100.model_copy(update={"memory_gb": mem_gb, "name": f"h100-{mem_gb}"})
        try:
            p = make_plan(m, hw, 8, wl, pinned={"colocate": False}, coefficients=GPU).plan
        except NoPlanFits:
            break
        seen.append(p)
        # every saving in the chosen plan is there because the plan without it does not fit
        # (or, rarely, because it is also faster)
        best = predict_plan(m, hw, p, wl, GPU)
        for knob, off in (
            ("offload", "none"),
            ("activation_checkpointing", False),
            ("reshard_after_forward", False),
        ):
            if getattr(p, knob) != off:
                alt = predict_plan(m, hw, p.with_(**{knob: off}), wl, GPU)
                assert not alt.prediction.fits or alt.prediction.total_s >= best.prediction.total_s
    assert len(seen) >= 3
    levels = [("none", "optimizer", "full").index(p.offload) for p in seen]
    assert levels == sorted(levels)


def test_alternatives_say_why_they_lost_and_json_shape():
    res = make_plan(spec("qwen3-30b-a3b"), H100, 8, MOE_RL, lora_rank=16, coefficients=GPU)
    d = res.to_dict()
    for key in (
        "trainer_devices",
        "engines",
        "engine_tp",
        "micro_batch_tokens",
        "activation_checkpointing",
        "offload",
        "alternatives",
    ):
        assert key in d
    pred = d["predicted"]
    assert set(pred["memory_per_device_gb"]) == {"trainer", "engine"}
    assert {"weights", "grads", "optimizer", "activations", "logits"} <= set(
        pred["trainer_memory_breakdown_gb"]
    )
    assert set(pred["step_seconds"]) == {"generate", "learn", "sync", "total"}
    assert d["alternatives"] and all(a["reason"] for a in d["alternatives"])
    assert any(a["reason"].startswith(("slower", "out of memory")) for a in d["alternatives"])


@pytest.mark.parametrize(
    ("name", "count", "lora"),
    [
        ("qwen3-30b-a3b", 8, 0),
        ("qwen3-30b-a3b", 64, 16),
        ("llama-3-8b", 16, 0),
        ("deepseek-v2-lite", 8, 0),
    ],
)
def test_one_plan_takes_under_two_seconds(name, count, lora):
    start = time.perf_counter()
    make_plan(spec(name), H100, count, MOE_RL, lora_rank=lora, coefficients=GPU)
    assert time.perf_counter() - start < 2.0

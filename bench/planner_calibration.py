"""Planner calibration check: predicted vs measured step time of the quickstart on this CPU.

1. Calibrate the CPU profile (the same micro-benchmarks as `arena plan --calibrate`), into a
   temporary cache unless ``--store`` is given.
2. Plan the quickstart shape with the fitted coefficients.
3. Measure that step: the quickstart loop (``arena_core.runtime``) was being written alongside
   this bench, so the step is run by a minimal stand-in with the same shape and work: HF
   ``generate`` with KV cache for ``prompts x group`` completions, a reference forward (beta > 0),
   forward+backward of the completion logprob loss in the plan's micro-batches, one AdamW step.

Prints both, their ratio, and (last line) one JSON object.

    python bench/planner_calibration.py [--threads N] [--steps 3] [--store]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# Quickstart shape (conf defaults: train.prompts_per_step 8, grpo group_size 8 and beta 0.001,
# runtime.mode sync); arithmetic prompts are short, so 32 prompt and 32 new tokens.
QUICKSTART = {
    "prompts_per_step": 8,
    "group_size": 8,
    "prompt_tokens": 32,
    "completion_tokens": 32,
    "kl_ref": True,
    "overlap": False,
}


def tiny_config_dict() -> dict:
    """The embedded tiny model's config when its module is there, else the same shape."""
    try:
        from arena_core.models import tiny_config

        return tiny_config().to_dict()
    except Exception:  # noqa: BLE001 - the models package may be absent in this build
        return {
            "model_type": "qwen2",
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "vocab_size": 264,
            "tie_word_embeddings": True,
            "max_position_embeddings": 1024,
        }


def build_model(cfg: dict):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    keys = (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "vocab_size",
        "tie_word_embeddings",
        "max_position_embeddings",
    )
    qcfg = Qwen2Config(**{k: cfg[k] for k in keys if k in cfg}, use_cache=True)
    return AutoModelForCausalLM.from_config(qcfg, attn_implementation="sdpa")


def measured_step(model, ref, opt, w: dict, micro_batch_tokens: int) -> dict[str, float]:
    """One quickstart-shaped step: generate, reference forward, learn in micro-batches, step."""
    import torch

    vocab = model.config.vocab_size
    n = w["prompts_per_step"] * w["group_size"]
    prompts = torch.randint(1, vocab, (w["prompts_per_step"], w["prompt_tokens"]))
    ids = prompts.repeat_interleave(w["group_size"], dim=0)
    t0 = time.perf_counter()
    model.eval()
    with torch.no_grad():
        seqs = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=w["completion_tokens"],
            min_new_tokens=w["completion_tokens"],
            do_sample=True,
            temperature=1.0,
            top_k=0,
            pad_token_id=0,
            eos_token_id=None,
        )
    t1 = time.perf_counter()
    model.train()
    seq_len = seqs.shape[1]
    per_mb = max(1, micro_batch_tokens // seq_len)
    adv = torch.randn(n)
    p = w["prompt_tokens"]
    for start in range(0, n, per_mb):
        chunk = seqs[start : start + per_mb]
        with torch.no_grad():
            ref_logits = ref(input_ids=chunk).logits[:, p - 1 : -1]
            ref_lp = (
                torch.log_softmax(ref_logits.float(), -1).gather(-1, chunk[:, p:, None]).squeeze(-1)
            )
        logits = model(input_ids=chunk).logits[:, p - 1 : -1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, chunk[:, p:, None]).squeeze(-1)
        kl = torch.exp(ref_lp - lp) - (ref_lp - lp) - 1
        loss = (-(adv[start : start + per_mb, None] * lp) + 0.001 * kl).mean()
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    opt.step()
    opt.zero_grad(set_to_none=True)
    t2 = time.perf_counter()
    return {"generate": t1 - t0, "learn": t2 - t1, "total": t2 - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--steps", type=int, default=3, help="measured steps (after one warm-up)")
    ap.add_argument("--store", action="store_true", help="keep the calibration in the cache")
    args = ap.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if not args.store:
        os.environ["ARENA_CACHE_DIR"] = tempfile.mkdtemp(prefix="arena-bench-cal-")
    from arena_core.planner import ModelSpec, Workload, make_plan
    from arena_core.planner.calibrate import run_calibration
    from arena_core.planner.hardware import cpu_profile

    t = time.perf_counter()
    cal, path = run_calibration(progress=lambda m: print(f"calibrating: {m}", flush=True))
    cal_s = time.perf_counter() - t
    print(f"calibration: {cal_s:.1f} s -> {path}")

    cfg = tiny_config_dict()
    spec = ModelSpec.from_dict(cfg, name="arena:tiny")
    workload = Workload(**QUICKSTART)
    result = make_plan(spec, cpu_profile(), 1, workload, lora_rank=0)
    pred = result.prediction
    print(f"plan: {result.plan.describe()}")

    model = build_model(cfg)
    ref = build_model(cfg).eval()
    opt = torch.optim.AdamW(model.parameters(), lr=5e-6)
    mb = result.plan.micro_batch_tokens
    measured_step(model, ref, opt, QUICKSTART, mb)  # warm-up
    runs = [measured_step(model, ref, opt, QUICKSTART, mb) for _ in range(args.steps)]
    measured = {k: statistics.median(r[k] for r in runs) for k in ("generate", "learn", "total")}
    predicted = {
        "generate": pred.generate_s,
        "learn": pred.learn_s + pred.sync_s,
        "total": pred.total_s,
    }
    print(f"{'':10s}{'predicted s':>12s}{'measured s':>12s}{'pred/meas':>10s}")
    for k in ("generate", "learn", "total"):
        print(f"{k:10s}{predicted[k]:12.3f}{measured[k]:12.3f}{predicted[k] / measured[k]:10.2f}")
    ratio = predicted["total"] / measured["total"]
    out = {
        "bench": "planner_calibration",
        "threads": torch.get_num_threads(),
        "calibration_seconds": round(cal_s, 1),
        "workload": QUICKSTART,
        "model_params": spec.total_params,
        "micro_batch_tokens": mb,
        "predicted_s": {k: round(v, 4) for k, v in predicted.items()},
        "measured_s": {k: round(v, 4) for k, v in measured.items()},
        "measured_runs_total_s": [round(r["total"], 4) for r in runs],
        "ratio_total": round(ratio, 3),
        "within_25pct": bool(abs(math.log(ratio)) <= math.log(1.25)),
        "step_runner": "bench stand-in (HF generate + logprob loss), not arena_core.runtime",
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())

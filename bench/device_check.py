"""GPU check: GRPO steps of a Qwen2.5-0.5B-shaped model with the torch engine, on one device.

A randomly initialised model with Qwen2.5-0.5B's config (embedded in
arena_core/planner/known_configs: nothing is downloaded) generates with the in-process torch
engine (static KV cache on CUDA) and trains with the Learner (bf16 weights on a GPU, the Triton
fused logprob in its head), as `arena-run runtime.device=cuda` does. Rewards are a fixed function
of the tokens (the share of tokens in the lower half of the vocabulary), so groups have signal and
every step learns. Reported (step 1 is warm-up and not counted):

* generated tokens/s and trained tokens/s;
* learner MFU: 6 x FLOP-parameters x trained tokens (+ causal attention) / learn seconds / the
  hardware profile's bf16 peak;
* peak device memory against the planner's prediction for this workload (one device, colocated);
* the fused logprob (Triton on CUDA) against the naive full-logits path at V=151,936, h=896,
  T=4,096: forward + backward time and peak memory above the inputs.

Usage: ``python bench/device_check.py`` (defaults: 16 prompts x 8 completions, 128 prompt tokens,
256 new tokens, 4 steps; about a minute on an H200, < 8 min budget). ``--smoke`` runs a tiny model
on whatever device there is (the CPU here) to check the script. The last line printed is one JSON
object. docs/gpu.md says how to run it on a GPU machine without a package index.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing it


CONFIG = ROOT / "arena_core" / "planner" / "known_configs" / "qwen2.5-0.5b" / "config.json"
SMOKE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 4096,
}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _peak_bytes(device: torch.device) -> float:
    if device.type == "cuda":
        return float(torch.cuda.max_memory_allocated(device))
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024  # Linux: KiB


def word_tokenizer(vocab: int):
    """A real tokenizer with exactly `vocab` tokens (one word each), so any sampled id decodes."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({f"t{i}": i for i in range(vocab)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="t0", eos_token="t1")
    fast.padding_side = "left"
    return fast


def build_model(cfg: dict, device: str, dtype: torch.dtype):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    keep = {k: v for k, v in cfg.items() if k not in ("architectures", "torch_dtype")}
    model = Qwen2ForCausalLM(Qwen2Config(**keep))
    return model.to(device=device, dtype=dtype)


def grpo_steps(args: argparse.Namespace, cfg: dict, dev) -> dict:
    from arena_algorithms.grpo import GRPO
    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.learn.learner import Learner
    from arena_core.learn.packing import Sample

    dtype = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dev.dtype]
    device = torch.device(dev.device)
    model = build_model(cfg, dev.device, dtype)
    V = int(cfg["vocab_size"])
    tokenizer = word_tokenizer(V)
    backend = TorchBackend(model, tokenizer)  # kv cache: static on CUDA
    algo = GRPO({"lr": 1e-6, "group_size": args.group, "beta": 0.0})
    learner = Learner(
        model,
        algo,
        micro_batch_tokens=args.micro_batch_tokens,
        norm_len=args.new_tokens,
        autocast=dev.autocast,
    )
    g = torch.Generator().manual_seed(1)
    prompts = [
        torch.randint(2, V, (args.prompt_tokens,), generator=g).tolist()
        for _ in range(args.prompts)
    ]
    gen_s = learn_s = 0.0
    gen_tok = train_tok = 0.0
    for step in range(args.steps):
        rows = [p for p in prompts for _ in range(args.group)]
        params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=step)
        _sync(device)
        t0 = time.perf_counter()
        out = backend.generate(rows, params)
        _sync(device)
        t_gen = time.perf_counter() - t0
        rewards = torch.tensor(
            [sum(t < V // 2 for t in c.token_ids) / max(1, len(c.token_ids)) for c in out]
        ).view(args.prompts, args.group)
        adv = algo.advantages(rewards).flatten().tolist()
        samples = [
            Sample(c.prompt_ids, c.token_ids, c.logprobs, a)
            for c, a in zip(out, adv, strict=True)
            if c.token_ids
        ]
        t0 = time.perf_counter()
        metrics = learner.step(samples)
        _sync(device)
        t_learn = time.perf_counter() - t0
        if step > 0 or args.steps == 1:  # step 1 warms up (allocator, kernels, Triton compile)
            gen_s, learn_s = gen_s + t_gen, learn_s + t_learn
            gen_tok += sum(len(c.token_ids) for c in out)
            train_tok += metrics.get("tokens/trained", 0.0)
        print(
            f"step {step + 1}: generate {t_gen:.2f} s, learn {t_learn:.2f} s, "
            f"loss {metrics.get('loss', float('nan')):.4f}",
            flush=True,
        )
    return {
        "generated_tokens_per_s": gen_tok / gen_s if gen_s else 0.0,
        "trained_tokens_per_s": train_tok / learn_s if learn_s else 0.0,
        "generate_s_per_step": gen_s / max(1, args.steps - 1),
        "learn_s_per_step": learn_s / max(1, args.steps - 1),
        "trained_tokens": train_tok,
        "peak_memory_gb": _peak_bytes(device) / 1e9,
    }


def learner_mfu(cfg: dict, trained_tok_s: float, seq: int, peak_flops: float) -> float:
    from arena_core.planner.model_spec import ModelSpec

    spec = ModelSpec.from_dict(cfg, name="qwen2.5-0.5b")
    per_token = 6.0 * (spec.flop_params + spec.num_layers * seq * spec.q_dim)
    return per_token * trained_tok_s / peak_flops if peak_flops else 0.0


def predicted_memory_gb(cfg: dict, args: argparse.Namespace, hw) -> float | None:
    """The planner's peak bytes per device for this workload on one device (colocated)."""
    from arena_core.planner import ModelSpec, Workload, make_plan

    spec = ModelSpec.from_dict(cfg, name="qwen2.5-0.5b")
    wl = Workload(args.prompts, args.group, args.prompt_tokens, args.new_tokens)
    try:
        result = make_plan(spec, hw, 1, wl)
    except Exception as exc:  # noqa: BLE001 - a figure, not the check's purpose
        print(f"plan: {exc}", flush=True)
        return None
    return result.prediction.peak_bytes / 1e9


def fused_vs_naive(device: torch.device, dtype: torch.dtype, T: int, h: int, V: int) -> dict:
    """Forward + backward of the head's logprobs: naive full logits vs the fused kernel."""
    from arena_core.kernels import fused_linear_logprob, naive_linear_logprob

    out: dict = {}
    g = torch.Generator(device="cpu").manual_seed(0)
    hidden0 = (torch.randn(T, h, generator=g) * 0.5).to(device, dtype)
    weight0 = (torch.randn(V, h, generator=g) * 0.02).to(device, dtype)
    targets = torch.randint(0, V, (T,), generator=g).to(device)
    for name, fn in (("naive", naive_linear_logprob), ("fused", fused_linear_logprob)):
        hidden = hidden0.clone().requires_grad_(True)
        weight = weight0.clone().requires_grad_(True)
        fn(hidden[:8], weight, targets[:8]).sum().backward()  # warm-up (Triton compiles)
        hidden.grad = weight.grad = None
        _sync(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
        t0 = time.perf_counter()
        fn(hidden, weight, targets).sum().backward()
        _sync(device)
        out[f"{name}_s"] = time.perf_counter() - t0
        if device.type == "cuda":
            out[f"{name}_peak_gb"] = (torch.cuda.max_memory_allocated(device) - base) / 1e9
        del hidden, weight
    out["time_ratio_fused_vs_naive"] = out["fused_s"] / out["naive_s"]
    if "naive_peak_gb" in out:
        out["memory_ratio_fused_vs_naive"] = out["fused_peak_gb"] / out["naive_peak_gb"]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true", help="tiny model, runs anywhere (CPU too)")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda (runtime.device)")
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--prompt-tokens", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--micro-batch-tokens", type=int, default=16384)
    args = p.parse_args()
    if args.smoke:
        args.steps, args.prompts, args.group = min(args.steps, 2), 2, 4
        args.prompt_tokens, args.new_tokens, args.micro_batch_tokens = 8, 8, 256

    from arena_core.device import device_plan
    from arena_core.planner.hardware import detect_local_profile

    started = time.perf_counter()
    dev = device_plan(args.device)
    cfg = json.loads(CONFIG.read_text())
    if args.smoke:
        cfg = {**cfg, **SMOKE}
    hw = detect_local_profile()
    print(f"device {dev.device} ({hw.description or hw.name}), {dev}", flush=True)
    result: dict = {"device": dev.device, "hardware": hw.name, "smoke": args.smoke, **dev.to_dict()}
    result.update(grpo_steps(args, cfg, dev))
    seq = args.prompt_tokens + args.new_tokens
    result["learner_mfu"] = learner_mfu(
        cfg, result["trained_tokens_per_s"], seq, hw.bf16_tflops * 1e12
    )
    predicted = predicted_memory_gb(cfg, args, hw)
    result["predicted_memory_gb"] = predicted
    if predicted:
        result["memory_measured_vs_predicted"] = result["peak_memory_gb"] / predicted
    device = torch.device(dev.device)
    T, h, V = (256, 64, 4096) if args.smoke else (4096, 896, 151_936)
    dtype = torch.bfloat16 if dev.dtype == "bfloat16" else torch.float32
    result["fused_logprob"] = {"T": T, "h": h, "V": V, "impl": dev.logprob_impl}
    result["fused_logprob"].update(fused_vs_naive(device, dtype, T, h, V))
    result["seconds"] = time.perf_counter() - started
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

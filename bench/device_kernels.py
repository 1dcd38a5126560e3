"""Device check for the fused logprob kernels: correctness, time and memory on one CUDA GPU.

Shapes: Qwen2.5-0.5B's LM head (h=896, V=151,936) and Qwen3.6-35B-A3B's (h=2048, V=248,320), at
T=4,096 and 16,384 tokens, bf16. For each, with the weight frozen (LoRA) and requiring grad (full
fine-tuning), it times forward + backward of a GRPO token-mean loss for:

* ``naive``: full logits, log_softmax in fp32 (what a plain trainer does);
* ``torch``: chunked torch row ops (``fused_linear_logprob(impl="torch")`` then the loss);
* ``triton``: the same with the Triton row kernels.

Correctness (T=4,096 only, first 1,024 tokens, so the reference stays small): logprobs and grads
of every variant against the naive one, relative to the tensor's max, bound 1e-2 (bf16).

It prints a table, then one JSON object as the last line. Without a CUDA GPU it says so, prints
``{"cuda": false}`` and exits 0. ``--smoke`` runs tiny shapes on whatever device there is (CPU:
Triton only under TRITON_INTERPRET=1) to check the script itself. Budget: < 3 min on an H100/H200.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch

HEADS = {"qwen2.5-0.5b": (896, 151_936), "qwen3.6-35b-a3b": (2048, 248_320)}
TOKENS = (4096, 16384)
VARIANTS = ("naive", "torch", "triton")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(variant: str, hidden, weight, targets, old, adv):
    """One forward + backward; returns (logprobs, grad_hidden, grad_weight or None)."""
    from arena_core.kernels import fused_linear_logprob, naive_linear_logprob
    from arena_core.learn.losses import grpo_token_loss

    hidden.grad = weight.grad = None
    if variant == "naive":
        logprobs = naive_linear_logprob(hidden, weight, targets)
    else:
        logprobs = fused_linear_logprob(hidden, weight, targets, impl=variant)
    loss, _ = grpo_token_loss(logprobs, old, adv, eps_low=0.2, eps_high=0.2)
    loss.mean().backward()
    return logprobs.detach(), hidden.grad, weight.grad


def _inputs(T: int, h: int, V: int, weight_grad: bool, device, dtype, seed: int = 0):
    g = torch.Generator(device=device).manual_seed(seed)
    hidden = torch.randn(T, h, generator=g, device=device).to(dtype).requires_grad_()
    weight = (torch.randn(V, h, generator=g, device=device) * h**-0.5).to(dtype)
    targets = torch.randint(0, V, (T,), generator=g, device=device)
    old = torch.full((T,), -float(torch.log(torch.tensor(float(V)))), device=device)
    adv = torch.randn(T, generator=g, device=device)
    return hidden, weight.requires_grad_(weight_grad), targets, old, adv


def _rel_err(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return 0.0
    return ((a.float() - b.float()).abs().max() / b.float().abs().max().clamp_min(1e-30)).item()


def _time_and_peak(variant, inputs, device, reps: int) -> tuple[float, float]:
    _step(variant, *inputs)  # warm-up: Triton compilation, cuBLAS heuristics
    _sync(device)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        _step(variant, *inputs)
        _sync(device)
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else 0
    return min(times), peak / 1e9


def _check(variants, h, V, weight_grad, device, dtype, T_check: int) -> dict[str, float]:
    inputs = _inputs(T_check, h, V, weight_grad, device, dtype, seed=1)
    ref = [x.clone() if x is not None else None for x in _step("naive", *inputs)]
    worst = {}
    for variant in variants:
        if variant == "naive":
            continue
        got = _step(variant, *inputs)
        worst[variant] = max(_rel_err(g, r) for g, r in zip(got, ref, strict=True))
    return worst


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        print("no CUDA GPU: nothing to measure (the CPU numbers come from bench/fused_logprob.py)")
        print(json.dumps({"cuda": False}))
        return 0
    device = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16
    heads, tokens, t_check = HEADS, TOKENS, 1024
    if args.smoke:
        heads, tokens, t_check = {"tiny": (16, 100)}, (7, 33), 7
    from arena_core.device import triton_usable

    variants = [v for v in VARIANTS if "triton" not in v or triton_usable(device)]
    summary: dict = {"cuda": cuda, "device": torch.cuda.get_device_name() if cuda else "cpu"}
    summary["dtype"], summary["results"] = "bfloat16", []
    print(
        f"{'head':<17}{'T':>6} {'weight':<7}{'variant':<14}{'ms':>9}{'x naive':>9}"
        f"{'peak GB':>9}{'max rel err':>12}"
    )
    failures = 0
    for name, (h, V) in heads.items():
        for weight_grad in (False, True):
            errors = _check(variants, h, V, weight_grad, device, dtype, t_check)
            for T in tokens:
                inputs = _inputs(T, h, V, weight_grad, device, dtype)
                naive_s = None
                for variant in variants:
                    sec, peak = _time_and_peak(variant, inputs, device, args.reps)
                    naive_s = sec if variant == "naive" else naive_s
                    err = errors.get(variant, 0.0)
                    failures += err > 1e-2
                    row = {
                        "head": name,
                        "T": T,
                        "weight_grad": weight_grad,
                        "variant": variant,
                        "ms": round(sec * 1e3, 2),
                        "time_ratio": round(sec / naive_s, 3),
                        "peak_gb": round(peak, 3),
                        "max_rel_err": float(f"{err:.3g}"),
                    }
                    summary["results"].append(row)
                    wname = "grad" if weight_grad else "frozen"
                    print(
                        f"{name:<17}{T:>6} {wname:<7}{variant:<14}{sec * 1e3:>9.1f}"
                        f"{sec / naive_s:>9.3f}{peak:>9.2f}{err:>12.2e}",
                        flush=True,
                    )
                del inputs
                if cuda:
                    torch.cuda.empty_cache()
    summary["correct"] = failures == 0
    print(json.dumps(summary))
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

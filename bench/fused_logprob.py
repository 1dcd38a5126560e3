"""The learner's LM head -> logprob -> GRPO loss -> backward vs naive, on CPU: peak memory, time.

Shape: Qwen2.5-0.5B's head (V=151,936, h=896), T=4,096 tokens, fp32. Settings: weight frozen
(LoRA) or requiring grad (full fine-tuning).

How memory is measured, and why this way: torch has no allocator statistics on CPU and
tracemalloc does not see its allocations, so each (variant, setting) runs in a fresh child process
that builds the inputs, runs a tiny warm-up (so one-time library buffers are not charged to either
variant), reads ``ru_maxrss`` (the process's peak resident set so far, which at that point is the
inputs and the runtime), runs the workload, and reads ``ru_maxrss`` again. The difference is the
peak memory the workload needed above its inputs, gradients included (W.grad counts for both
variants when the weight requires grad). A fresh process per run means no variant inherits another
one's freed-but-cached pages. Children run one after another, so at most one naive workload
(~10 GB) is alive at a time.

Time is the wall time of the same workload in the same child (the best of ``--repeats`` runs). The
machine is shared, so each pair (naive, fused) runs back to back and only the ratio is reported.

Variants: ``naive`` (full logits, log-softmax, gather, then the learner's GRPO token loss) and
``learner``: exactly what ``Learner`` runs, its default head function
(``arena_core.learn.learner.default_logprob_fn``: ``fused_linear_logprob``, which recomputes the
logits in backward when the weight needs a gradient) followed by the same GRPO token loss.

Usage: ``python bench/fused_logprob.py [--tokens 4096] [--repeats 1]``; the last line printed is
one JSON object (ratios are learner / naive).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

V, H = 151_936, 896
SETTINGS = {"frozen": False, "weight_grad": True}  # name -> the LM head weight requires grad


def _inputs(T: int, vocab: int, weight_grad: bool, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(T, H, generator=g).requires_grad_()
    weight = torch.randn(vocab, H, generator=g).mul_(0.05).requires_grad_(weight_grad)
    targets = torch.randint(0, vocab, (T,), generator=g)
    old_logprobs = torch.full((T,), -12.0)  # ~log(1/V): ratios near 1, some clipped
    advantages = torch.randn(T, generator=g)
    return hidden, weight, targets, old_logprobs, advantages


def _learner_path_step(variant: str, inputs) -> None:
    """The learner's per-token path: head logprobs, then the GRPO surrogate, weighted sum."""
    from arena_core.kernels import naive_linear_logprob
    from arena_core.learn.learner import default_logprob_fn
    from arena_core.learn.losses import grpo_token_loss

    hidden, weight, targets, old_logprobs, advantages = inputs
    hidden.grad = weight.grad = None
    if variant == "naive":
        logp = naive_linear_logprob(hidden, weight, targets)
    else:
        logp = default_logprob_fn()(hidden, weight, targets)
    loss, _ = grpo_token_loss(logp, old_logprobs, advantages, eps_low=0.2, eps_high=0.2)
    (loss.sum() / loss.numel()).backward()


def _max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def child(variant: str, setting: str, T: int, repeats: int) -> dict:
    """One fresh process: warm up, baseline, workload; returns peak-above-inputs and best time."""
    weight_grad = SETTINGS[setting]
    _learner_path_step(variant, _inputs(64, 2048, weight_grad))  # library warm-up, tiny
    inputs = _inputs(T, V, weight_grad)
    base = _max_rss_bytes()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _learner_path_step(variant, inputs)
        times.append(time.perf_counter() - t0)
    return {"peak_bytes": _max_rss_bytes() - base, "seconds": min(times)}


def _run_child(variant: str, setting: str, T: int, repeats: int) -> dict:
    cmd = [sys.executable, __file__, "--child", variant, setting, "--tokens", str(T)]
    cmd += ["--repeats", str(repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"child {variant}/{setting} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--settings", default=None, help="comma-separated; default: all that apply")
    ap.add_argument("--child", nargs=2, metavar=("VARIANT", "SETTING"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.tokens, args.repeats)))
        return
    summary: dict[str, float | int | str] = {"T": args.tokens, "V": V, "h": H, "dtype": "float32"}
    summary["default_variant"] = "learner (Learner's default_logprob_fn + GRPO token loss)"
    settings = args.settings.split(",") if args.settings else list(SETTINGS)
    print(f"{'setting':<22}{'variant':<16}{'peak GB':>9}{'mem x':>8}{'s':>8}{'time x':>8}")
    for setting in settings:
        fused_variants = ["learner"]
        naive = _run_child("naive", setting, args.tokens, args.repeats)
        print(
            f"{setting:<22}{'naive':<16}{naive['peak_bytes'] / 1e9:>9.2f}{1:>8.3f}"
            f"{naive['seconds']:>8.1f}{1:>8.3f}",
            flush=True,
        )
        summary[f"naive_peak_gb_{setting}"] = round(naive["peak_bytes"] / 1e9, 3)
        summary[f"naive_s_{setting}"] = round(naive["seconds"], 2)
        for variant in fused_variants:
            fused = _run_child(variant, setting, args.tokens, args.repeats)
            mem = fused["peak_bytes"] / naive["peak_bytes"]
            tim = fused["seconds"] / naive["seconds"]
            print(
                f"{setting:<22}{variant:<16}{fused['peak_bytes'] / 1e9:>9.2f}{mem:>8.3f}"
                f"{fused['seconds']:>8.1f}{tim:>8.3f}",
                flush=True,
            )
            summary[f"mem_ratio_{setting}"] = round(mem, 4)
            summary[f"time_ratio_{setting}"] = round(tim, 4)
            summary[f"{variant}_peak_gb_{setting}"] = round(fused["peak_bytes"] / 1e9, 3)
            summary[f"{variant}_s_{setting}"] = round(fused["seconds"], 2)
    print(json.dumps(summary))


if __name__ == "__main__":
    main()

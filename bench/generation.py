"""Generation throughput of the torch backend on the tiny model, against HF `generate`.

Prints generated tokens/s of TorchBackend and of `model.generate` (same prompts, same batch,
same number of new tokens, sampling at temperature 1) side by side, at 1 and 2 torch threads:
on a shared 2-core machine the thread count matters more than anything else. Last line: one JSON
object.

    python bench/generation.py [--batch 64] [--new-tokens 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from arena_core.engines.base import SamplingParams
from arena_core.engines.torch_backend import TorchBackend
from arena_core.models import load_policy


def _prompts(backend: TorchBackend, batch: int) -> list[list[int]]:
    return [
        backend.encode_chat([{"role": "user", "content": f"What is {i % 97} + {(i * 7) % 89}?"}])
        for i in range(batch)
    ]


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", default="arena:tiny-init")
    args = parser.parse_args()
    policy = load_policy({"name_or_path": args.model, "lora": {"r": 0}})
    backend = TorchBackend(policy.model, policy.tokenizer)
    prompts = _prompts(backend, args.batch)
    # No EOS or stop: every row decodes exactly new_tokens, so both sides do the same work.
    backend.eos_ids = set()
    params = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, seed=0)
    enc = policy.tokenizer.pad({"input_ids": prompts}, return_tensors="pt")
    tokens = args.batch * args.new_tokens

    def hf() -> None:
        with torch.no_grad():
            policy.model.generate(
                **enc,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                do_sample=True,
            )

    result: dict[str, float | int | str] = {
        "model": args.model,
        "batch": args.batch,
        "new_tokens": args.new_tokens,
    }
    for threads in (1, 2):
        torch.set_num_threads(threads)
        backend.generate(prompts[:2], SamplingParams(max_new_tokens=2))  # warm-up
        ours = tokens / _best(lambda: backend.generate(prompts, params), args.repeats)
        ref = tokens / _best(hf, args.repeats)
        print(
            f"threads={threads}: torch backend {ours:8.0f} tok/s   HF generate {ref:8.0f} tok/s   "
            f"ratio {ours / ref:.2f}"
        )
        result[f"backend_tok_s_{threads}t"] = round(ours, 1)
        result[f"hf_generate_tok_s_{threads}t"] = round(ref, 1)
        result[f"ratio_{threads}t"] = round(ours / ref, 3)
    print(json.dumps(result))


if __name__ == "__main__":
    main()

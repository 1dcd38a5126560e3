"""The Tinker server's forward_backward on an RL batch: each group's prompt run once vs every datum whole.

The batch is what tinker-cookbook's `math_rl` arithmetic recipe sends for SmolLM2: `--groups`
questions ("What is X + Y?" after its few-shot turn, in SmolLM2's chat template with its default
system message), `--group-size` short answers each, pre-shifted datums under the
`stable_reinforce` loss; one group in `--learning` carries advantages (the others are flat, as
most groups are at a few percent accuracy, and are only scored). Both ways run
`arena_core.tinker.learner.score` on the same LoRA'd model (rank 32 on attention, MLP and
unembedding, the SDK's default), alternating, `--repeats` times each; the line printed gives the
median seconds and their ratio, and the largest logprob difference between the two.

    python bench/tinker_prefix.py [--model smollm2-135m-instruct] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import numpy as np
import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--learning", type=int, default=1, help="groups with nonzero advantages")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from peft import LoraConfig, get_peft_model

    from arena_core.learn.learner import default_logprob_fn
    from arena_core.models import load_policy
    from arena_core.tinker.learner import head_logprob_fn, score
    from arena_core.tinker.losses import LossSpec
    from arena_core.tinker.wire import WireDatum

    torch.manual_seed(0)
    policy = load_policy({"name_or_path": args.model, "lora": {"r": 0}})
    tok = policy.tokenizer
    head = policy.model.get_output_embeddings()
    unembed = [n for n, m in policy.model.named_modules() if m is head and n]
    targets = [*("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")]
    model = get_peft_model(policy.model, LoraConfig(r=32, target_modules=targets + unembed))
    rng = random.Random(0)
    data, learn = [], []
    for g in range(args.groups):
        x, y = rng.randrange(101), rng.randrange(101)
        messages = [
            {"role": "user", "content": "What is 4 + 5?"},
            {"role": "assistant", "content": "9"},
            {"role": "user", "content": f"What is {x} + {y}?"},
        ]
        prompt = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tok(prompt, add_special_tokens=False)["input_ids"]
        for _ in range(args.group_size):
            answer = tok(f"{x + y + rng.choice((-10, -1, 0, 1, 10))}<|im_end|>")["input_ids"]
            row = ids + answer
            n = len(row) - 1
            adv = rng.gauss(0, 1) if g < args.learning else 0.0
            mask = (np.arange(n) >= len(ids) - 1).astype(np.float32)
            inputs = {
                "target_tokens": np.asarray(row[1:], dtype=np.int64),
                "logprobs": np.full(n, -1.0, dtype=np.float32) * mask,
                "advantages": (adv * mask).astype(np.float32),
            }
            data.append(WireDatum(tokens=row[:-1], inputs=inputs, sampled=mask > 0))
            learn.append(adv != 0.0)
    fused = head_logprob_fn(model, "default", default_logprob_fn())
    spec = LossSpec("stable_reinforce")
    seconds: dict[bool, list[float]] = {True: [], False: []}
    logprobs: dict[bool, list[np.ndarray]] = {}
    for _ in range(args.repeats):
        for shared in (False, True):
            model.zero_grad(set_to_none=True)
            start = time.perf_counter()
            out, _ = score(model, data, spec, learn, fused, "cpu", shared_prefix=shared)
            seconds[shared].append(time.perf_counter() - start)
            logprobs[shared] = [o["logprobs"] for o in out]
    diff = max(
        float(np.abs(a - b).max()) for a, b in zip(logprobs[True], logprobs[False], strict=True)
    )
    packed, shared = statistics.median(seconds[False]), statistics.median(seconds[True])
    print(
        json.dumps(
            {
                "model": args.model,
                "datums": len(data),
                "tokens_per_datum": round(sum(len(d.tokens) for d in data) / len(data), 1),
                "learning_datums": sum(learn),
                "threads": args.threads,
                "packed_s": round(packed, 2),
                "shared_prefix_s": round(shared, 2),
                "speedup": round(packed / shared, 2),
                "max_logprob_diff": diff,
            }
        )
    )


if __name__ == "__main__":
    main()

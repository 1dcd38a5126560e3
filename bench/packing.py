"""Learn tokens/s with packed micro-batches vs padded ones, on variable-length completions.

Packed: sequences concatenated into rows with position ids restarting per sequence and the
learner's explicit block-diagonal attention mask (no padding token is ever computed; on CPU the
dense mask rules out the fused causal attention kernel, which is why padding is the default). Padded: one sequence per row, right-padded to the longest in the
micro-batch. Both share the token budget, the samples, the tiny policy and GRPO, and run
alternately. Only real tokens count towards tokens/s. Last line: one JSON object.

Usage: python bench/packing.py [--groups 8] [--repeats 3] [--threads 1] [--budget 2048]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _learn_common import grpo, median, set_threads, synthetic_groups, tiny_policy  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=int, default=2048)
    args = ap.parse_args()
    set_threads(args.threads)

    from arena_core.learn.learner import Learner

    policy = tiny_policy()
    samples = [
        s
        for g in synthetic_groups(
            args.groups,
            args.group_size,
            vocab=policy.model.config.vocab_size,
            completion_len=(4, 120),  # a long tail: padding waste grows with the spread
        )
        for s in g
    ]
    real = sum(s.n_input for s in samples)
    learners = {
        mode: Learner(
            policy.model, grpo(args.group_size), micro_batch_tokens=args.budget, batching=mode
        )
        for mode in ("pack", "pad")
    }
    computed = {
        m: sum(int(mb.input_ids.numel()) for mb in lr.micro_batches(samples))
        for m, lr in learners.items()
    }
    for lr in learners.values():
        lr.step(samples)  # warm-up
    times: dict[str, list[float]] = {"pack": [], "pad": []}
    for _ in range(args.repeats):
        for mode, lr in learners.items():
            t0 = time.perf_counter()
            lr.step(samples)
            times[mode].append(time.perf_counter() - t0)
    tps = {m: real / median(t) for m, t in times.items()}
    result = {
        "samples": len(samples),
        "real_tokens": real,
        "computed_tokens_packed": computed["pack"],
        "computed_tokens_padded": computed["pad"],
        "tokens_per_s_packed": round(tps["pack"], 1),
        "tokens_per_s_padded": round(tps["pad"], 1),
        "ratio_packed_over_padded": round(tps["pack"] / tps["pad"], 4),
    }
    print(f"packed {result['tokens_per_s_packed']} tok/s vs padded {result['tokens_per_s_padded']}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learn-step time with gradient-free groups dropped before the learner vs trained anyway.

Half of the groups have all-equal rewards (zero advantage everywhere): they contribute nothing to
the gradient, so the runtime drops them (`groups/dropped_zero_adv`). Without skipping, the learner
still runs their forward and backward. Both variants run side by side on the same samples, the
tiny policy and GRPO, alternating to share the machine's noise. Last line: one JSON object;
`ratio` = skip / no-skip, goal <= 0.55.

Usage: python bench/zero_adv_skip.py [--groups 16] [--group-size 8] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _learn_common import grpo, median, set_threads, synthetic_groups, tiny_policy  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    set_threads(args.threads)

    import time

    from arena_core.learn.learner import Learner

    policy = tiny_policy()
    algo = grpo(args.group_size)
    learner = Learner(policy.model, algo, micro_batch_tokens=2048)
    groups = synthetic_groups(
        args.groups, args.group_size, vocab=policy.model.config.vocab_size, zero_adv_fraction=0.5
    )
    every = [s for g in groups for s in g]

    def informative() -> list:
        # What the runtime does: advantages computed per group, all-zero groups dropped.
        return [s for g in groups if any(abs(s.advantage) > 1e-8 for s in g) for s in g]

    learner.step(every)  # warm-up (allocator, kernels)
    skip, full = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        learner.step(informative())
        skip.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        learner.step(every)
        full.append(time.perf_counter() - t0)
    result = {
        "groups": args.groups,
        "zero_adv_groups": args.groups // 2,
        "group_size": args.group_size,
        "learn_s_skip": round(median(skip), 4),
        "learn_s_no_skip": round(median(full), 4),
        "ratio": round(median(skip) / median(full), 4),
        "goal": 0.55,
    }
    print(f"skip {result['learn_s_skip']} s vs no skip {result['learn_s_no_skip']} s")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

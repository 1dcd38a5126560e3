"""Cost of the sandbox's kernel isolation: worker start time and per-call overhead, before/after.

"before" is `sandbox.isolation=none` (child processes with rlimits and process-group kill, the
sandbox before issue 11); "after" is bubblewrap (PID, user, IPC, UTS and network namespaces,
read-only file system, private /tmp, process limit). Both run side by side in one process,
alternating, on the same trivial reward file:

- `start_ms`: RewardPool construction until its worker has imported the reward and said ready
  (one worker; the median of `--starts` pools).
- `per_call_ms`: a warm pool (`--workers`) scores a batch of `--batch` items; the time per item,
  amortised over the batch (median of `--repeats` batches).
- `overhead_per_call_ms`: per_call_ms minus the reward's own time measured in this process (the
  cost of the sandbox's protocol, pipes and process hops per call, amortised).
- `replaced_next_call_ms`: a batch scored right after a batch whose worker crashed: the pool
  starts the replacement when the failed call ends, so the next step finds a started worker.

Goal (issue 11): overhead_per_call_ms < 0.05 after isolation. Last line: one JSON object.

Usage: python bench/sandbox.py [--batch 512] [--workers 2] [--repeats 5] [--starts 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from arena_core.sandbox import RewardPool, SandboxPolicy, isolation_status

REWARD = """
def reward(question, answer, completion):
    if completion == "crash":
        import os
        os._exit(3)
    return 1.0 if completion.endswith(answer) else 0.0
"""
GOAL_MS = 0.05


def _in_process_ms(items: list[tuple[str, str, str]]) -> float:
    namespace: dict = {}
    exec(REWARD, namespace)  # the same function, called directly: the reward's own cost
    fn = namespace["reward"]
    started = time.perf_counter()
    for item in items:
        fn(*item)
    return (time.perf_counter() - started) * 1e3 / len(items)


def _start_ms(path: str, policy: SandboxPolicy) -> float:
    started = time.perf_counter()
    with RewardPool(path, workers=1, policy=policy):
        return (time.perf_counter() - started) * 1e3


def _per_call_ms(pool: RewardPool, items: list[tuple[str, str, str]]) -> float:
    started = time.perf_counter()
    outcomes = pool.score(items)
    elapsed = time.perf_counter() - started
    assert all(o.ok for o in outcomes), outcomes[0]
    return elapsed * 1e3 / len(items)


def _replaced_next_ms(pool: RewardPool, items: list[tuple[str, str, str]]) -> float:
    pool.score([("q", "7", "crash")])  # kills a worker; its replacement starts right away
    time.sleep(0.5)  # the trainer's learner step: the replacement imports meanwhile
    return _per_call_ms(pool, items) * len(items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--starts", type=int, default=5)
    args = parser.parse_args()
    variants = {"before": SandboxPolicy(isolation="none"), "after": SandboxPolicy()}
    status = isolation_status(variants["after"])
    items = [("q", "7", f"the answer is {i % 10}") for i in range(args.batch)]
    own_ms = _in_process_ms(items)
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "reward.py")
        Path(path).write_text(REWARD)
        starts: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(args.starts):  # alternating: both share the machine's noise
            for name, policy in variants.items():
                starts[name].append(_start_ms(path, policy))
        pools = {k: RewardPool(path, workers=args.workers, policy=p) for k, p in variants.items()}
        try:
            calls: dict[str, list[float]] = {k: [] for k in variants}
            for pool in pools.values():
                _per_call_ms(pool, items)  # warm-up
            for _ in range(args.repeats):
                for name, pool in pools.items():
                    calls[name].append(_per_call_ms(pool, items))
            replaced = {name: _replaced_next_ms(pool, items) for name, pool in pools.items()}
        finally:
            for pool in pools.values():
                pool.close()
    result: dict = {"bench": "sandbox", "isolation": status.line(), "batch": args.batch}
    result["workers"] = args.workers
    result["reward_own_ms"] = round(own_ms, 5)
    for name in variants:
        per_call = statistics.median(calls[name])
        result[name] = {
            "start_ms": round(statistics.median(starts[name]), 2),
            "per_call_ms": round(per_call, 5),
            "overhead_per_call_ms": round(per_call - own_ms, 5),
            "replaced_next_batch_ms": round(replaced[name], 2),
            "batch_ms": round(per_call * args.batch, 2),
        }
        print(f"{name:6} {result[name]}")
    before, after = result["before"], result["after"]
    result["start_ratio_after_over_before"] = round(after["start_ms"] / before["start_ms"], 3)
    result["per_call_ratio_after_over_before"] = round(
        after["per_call_ms"] / before["per_call_ms"], 3
    )
    result["goal_overhead_ms"] = GOAL_MS
    result["meets_goal"] = after["overhead_per_call_ms"] < GOAL_MS
    print(json.dumps(result))


if __name__ == "__main__":
    main()

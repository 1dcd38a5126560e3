"""FSDP2 trainer ranks on the CPU: two ranks (Ray actors, gloo) against one in-process rank.

The same GRPO batch (``--samples`` completions of ``--completion`` tokens after ``--prompt``
prompt tokens, the embedded ``arena:tiny-init`` model) is learned for ``--steps`` steps by the
in-process Learner (one torch thread: the one-rank baseline) and by a TrainerGroup of two FSDP2
ranks (one thread each: the two ranks use both cores). Reported: the mean step time of each after
the first (warm-up) step, their ratio, and the largest weight difference after the last step
(the two must train the same model).

Usage: ``python bench/fsdp.py [--steps 4] [--samples 32]``. The last line is one JSON object. On a
shared machine the times are noisy; the two runs are measured back to back in one process.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

MODEL = {"name_or_path": "arena:tiny-init", "lora": {"r": 0}}
ALGO = {"name": "grpo", "group_size": 8, "lr": 1e-4, "beta": 0.0}


def batch(n: int, prompt: int, completion: int, vocab: int):
    from arena_core.learn.packing import Sample

    g = torch.Generator().manual_seed(0)
    return [
        Sample(
            torch.randint(3, vocab, (prompt,), generator=g).tolist(),
            torch.randint(3, vocab, (completion,), generator=g).tolist(),
            [-4.0] * completion,
            float(torch.randn((), generator=g)),
        )
        for _ in range(n)
    ]


def timed_steps(step, samples, steps: int) -> list[float]:
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        step(samples)
        times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--samples", type=int, default=32)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--completion", type=int, default=32)
    p.add_argument("--micro-batch-tokens", type=int, default=1024)
    args = p.parse_args()
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    from arena_algorithms.grpo import GRPO
    from arena_core.distributed.cluster import Layout, RayCluster
    from arena_core.distributed.trainer_group import TrainerGroup
    from arena_core.learn.learner import Learner
    from arena_core.models import load_policy

    torch.set_num_threads(1)
    policy = load_policy(MODEL, device="cpu")
    vocab = int(policy.model.config.vocab_size)
    samples = batch(args.samples, args.prompt, args.completion, vocab)
    learner_kw = {"micro_batch_tokens": args.micro_batch_tokens, "norm_len": args.completion}
    reference = copy.deepcopy(policy.model)
    one = Learner(reference, GRPO({k: v for k, v in ALGO.items() if k != "name"}), **learner_kw)
    one_times = timed_steps(one.step, samples, args.steps)

    layout = Layout(trainer_devices=2, engines=1, colocate="shared")
    with TemporaryDirectory() as run_dir, RayCluster(layout, run_dir=Path(run_dir)) as cluster:
        group = TrainerGroup(
            cluster, policy.model, model_cfg=MODEL, algo_cfg=ALGO, learner_kw=learner_kw
        )
        two_times = timed_steps(group.step, samples, args.steps)
        group.close()
    diff = max(
        float((a - b).abs().max())
        for a, b in zip(
            policy.model.state_dict().values(), reference.state_dict().values(), strict=True
        )
    )
    one_s = statistics.fmean(one_times[1:] or one_times)
    two_s = statistics.fmean(two_times[1:] or two_times)
    params = sum(p.numel() for p in reference.parameters())
    result = {
        "model_params": params,
        "tokens_per_step": args.samples * (args.prompt + args.completion),
        "micro_batches": len(one.micro_batches(samples)),
        "one_rank_step_s": round(one_s, 4),
        "two_ranks_step_s": round(two_s, 4),
        "ratio_two_vs_one": round(two_s / one_s, 3),
        "max_weight_diff": diff,
        "cores": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

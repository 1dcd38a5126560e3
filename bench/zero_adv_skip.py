"""Whole-step time with gradient-free groups dropped (and refilled) vs trained anyway.

Half of the prompts get all-equal rewards (zero advantage everywhere): they contribute nothing to
the gradient. The runtime drops such groups (`groups/dropped_zero_adv`) and samples more prompts
to fill the step (`train.max_sampling_rounds`), so skipping trades learner work for extra
generation. Both variants are timed as whole steps, generation + sandboxed reward + learner:

- `skip`: the runtime's own `GroupCollector.collect` (drop + refill rounds), then `Learner.step`
  on the informative groups.
- `no_skip`: one round of the same prompts, every group (informative or not) to the learner.

They run side by side on the tiny policy with GRPO and the torch backend, alternating to share
the machine's noise. Last line: one JSON object; `ratio` = skip / no-skip step time, and
`ratio_per_informative_group` compares the time per group that carries a gradient.

Usage: python bench/zero_adv_skip.py [--groups 8] [--group-size 8] [--repeats 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _learn_common import grpo, median, set_threads, tiny_policy  # noqa: E402

# Even questions: every completion scores 1 (no signal). Odd: parity of the completion's length.
REWARD = """
def reward(question, answer, completion):
    return 1.0 if int(question) % 2 == 0 else float(len(completion) % 2)
"""


class _Task:
    name, reward = "bench-zero-adv", "file"

    def train_examples(self, seed: int):
        from arena_core.tasks import Example

        rng = random.Random(seed)
        while True:
            n = rng.randrange(100)
            yield Example(question=str(n), answer=str(n))

    def messages(self, example) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Count to {example.question}"}]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    set_threads(args.threads)

    import torch

    from arena_core.engines.base import SamplingParams
    from arena_core.engines.torch_backend import TorchBackend
    from arena_core.learn.learner import Learner
    from arena_core.learn.packing import Sample
    from arena_core.llm_rl.groups import GroupCollector
    from arena_core.run_parts.prompts import PromptEncoder
    from arena_core.run_parts.scoring import RewardScorer
    from arena_core.sandbox import RewardPool

    policy = tiny_policy()
    algo = grpo(args.group_size)
    learner = Learner(policy.model, algo, micro_batch_tokens=2048)
    learner.optimizer.step = lambda: None  # same weights for every repeat: comparable steps
    backend = TorchBackend(policy.model, policy.tokenizer)
    task = _Task()
    encoder = PromptEncoder(task, policy.tokenizer)
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=1.0)
    reward_file = Path(tempfile.mkdtemp(prefix="arena-bench-")) / "reward.py"
    reward_file.write_text(REWARD)
    g = args.group_size

    with RewardPool(str(reward_file), workers=1) as pool:
        scorer = RewardScorer(pool)

        def skip_step(seed: int) -> tuple[int, int]:
            collector = GroupCollector(
                task, encoder, backend, scorer, algo, params, seed=seed, max_rounds=4
            )
            batch = collector.collect(args.groups, step=0)
            learner.step(batch.samples)
            return batch.groups_kept, batch.groups_sampled

        def no_skip_step(seed: int) -> tuple[int, int]:
            stream = task.train_examples(seed)
            examples = [next(stream) for _ in range(args.groups)]
            prompts = [encoder(ex) for ex in examples for _ in range(g)]
            comps = backend.generate(prompts, params)
            items = [
                (ex.question, ex.answer, c.text)
                for ex, c in zip((ex for ex in examples for _ in range(g)), comps, strict=True)
            ]
            values, _ = scorer(items)
            adv = algo.advantages(torch.tensor(values).view(args.groups, g)).flatten()
            samples = [
                Sample(c.prompt_ids, c.token_ids, c.logprobs, float(a))
                for c, a in zip(comps, adv, strict=True)
            ]
            learner.step(samples)
            informative = int((adv.view(args.groups, g).abs().amax(1) > 1e-8).sum())
            return informative, args.groups

        no_skip_step(0)  # warm-up (allocator, kernels, reward workers)
        skip, full, kept, sampled, informative_full = [], [], [], [], []
        for r in range(args.repeats):
            t0 = time.perf_counter()
            k, s = skip_step(r + 1)
            skip.append(time.perf_counter() - t0)
            kept.append(k)
            sampled.append(s)
            t0 = time.perf_counter()
            i, _ = no_skip_step(r + 1)
            full.append(time.perf_counter() - t0)
            informative_full.append(i)
    per_group_skip = sum(skip) / max(1, sum(kept))
    per_group_full = sum(full) / max(1, sum(informative_full))
    result = {
        "groups": args.groups,
        "group_size": args.group_size,
        "max_new_tokens": args.max_new_tokens,
        "step_s_skip": round(median(skip), 4),
        "step_s_no_skip": round(median(full), 4),
        "groups_sampled_skip": round(sum(sampled) / len(sampled), 2),
        "informative_groups_skip": round(sum(kept) / len(kept), 2),
        "informative_groups_no_skip": round(sum(informative_full) / len(informative_full), 2),
        "ratio": round(median(skip) / median(full), 4),
        "ratio_per_informative_group": round(per_group_skip / per_group_full, 4),
    }
    print(
        f"whole step: skip+refill {result['step_s_skip']} s ({result['groups_sampled_skip']} "
        f"groups sampled, {result['informative_groups_skip']} trained) vs no skip "
        f"{result['step_s_no_skip']} s ({result['informative_groups_no_skip']} of "
        f"{args.groups} informative)"
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
